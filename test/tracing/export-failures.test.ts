import { ExportResultCode, type ExportResult } from '@opentelemetry/core'
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace'
import pino from 'pino'
import t, { type Test } from 'tap'
import { describeExportError, ReportingExporter } from '../../src/tracing/export-failures.ts'
import { metric } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts'
import { eventually, type Harness, type LogLine, sidecarFor, startTestServer } from '../helpers/sidecar-harness.ts'
import { closedPort } from '../helpers/webhook-receiver.ts'
import { sleep } from '../helpers/timing.ts'

// docs/tracing.md, "Cost and failure": an export that fails (collector down, refused, answering an
// error) never holds a call; it is logged as a warn line naming the endpoint and the cause, at most
// once a minute, and counted in sidecar_trace_export_failures_total.

const failureLines = (h: Harness): LogLine[] => h.logs.filter(line => line.msg === 'trace export failed')

/** A ready sidecar (auth off) exporting to `endpoint` every 20 ms, before an app answering {"ok":true}. */
async function tracedSidecar (t: Test, endpoint: string): Promise<Harness> {
  const app = await startTestServer((_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}') })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_BSP_SCHEDULE_DELAY: '20' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  return h
}

t.test('a collector answering 500: every failed export counted, one warn line naming the endpoint and the cause', async t => {
  const otlp = await startOtlpReceiver({ failWith: 500 })
  t.teardown(() => otlp.close())
  const h = await tracedSidecar(t, otlp.url)
  t.equal(await metric(h, 'sidecar_trace_export_failures_total'), 0, 'none before the first call')
  for (let i = 1; i <= 3; i++) {
    const before = otlp.exports.length
    const r = await send(`${h.base}/v4/proj/app/predict`, { method: 'POST', body: '{}' })
    t.equal(r.status, 200, `call ${i} is answered`)
    // the next call comes once this one's spans went out, were refused, and every refused export was counted
    await eventually(async () => otlp.exports.length > before && await metric(h, 'sidecar_trace_export_failures_total') === otlp.exports.length)
  }
  t.ok(otlp.exports.length >= 3, `${otlp.exports.length} exports reached the collector, each refused and counted`)
  const lines = failureLines(h)
  t.equal(lines.length, 1, 'one line for every failure within the minute')
  const { time, spans, ...line } = lines[0] as LogLine
  t.type(time, 'number')
  t.ok(Number.isInteger(spans) && (spans as number) >= 1 && (spans as number) <= 3, `the spans of that export (${String(spans)}): the first call's server, queue and app spans, or some of them`)
  t.same(line, {
    level: 40,
    name: 'app-sidecar',
    endpoint: `${otlp.url}/v1/traces`,
    cause: 'status 500 Internal Server Error',
    failures: 1,
    msg: 'trace export failed'
  }, 'the exact line: the endpoint, the cause, the failures it stands for')
})

t.test('a collector that is down (a closed port): the call is not held; the failure is counted and logged once', async t => {
  const port = await closedPort()
  const h = await tracedSidecar(t, `http://127.0.0.1:${port}`)
  const r = await send(`${h.base}/v4/proj/app/predict`, { method: 'POST', body: '{}' })
  t.equal(r.status, 200)
  t.equal(await metric(h, 'sidecar_trace_export_failures_total'), 0, 'answered at once: before the export failed (the exporter retries a refused connection for a few seconds)')
  await eventually(async () => await metric(h, 'sidecar_trace_export_failures_total') >= 1, 20_000)
  await eventually(() => failureLines(h).length > 0)
  t.match(failureLines(h), [{ level: 40, endpoint: `http://127.0.0.1:${port}/v1/traces`, cause: 'connection refused', failures: 1 }], 'one line: the endpoint and the cause')
})

/** An exporter that fails every export with `error`. */
const failing = (error: Error): SpanExporter => ({
  export: (_spans: ReadableSpan[], done: (result: ExportResult) => void) => { done({ code: ExportResultCode.FAILED, error }) },
  shutdown: async () => {}
})

t.test('ReportingExporter: at most one line per interval, the next one counting the failures in between; results pass through', async t => {
  const lines: LogLine[] = []
  const logger = pino({ base: null, timestamp: false }, { write: (text: string) => { lines.push(JSON.parse(text) as LogLine) } })
  let counted = 0
  const exporter = new ReportingExporter(failing(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:4318'), { code: 'ECONNREFUSED' })),
    'http://collector:4318/v1/traces', { logger, failures: { inc: () => { counted++ } }, intervalMs: 200 })
  const results: ExportResult[] = []
  const exportOnce = (): void => { exporter.export([], result => { results.push(result) }) }
  exportOnce()
  exportOnce()
  exportOnce()
  t.equal(counted, 3)
  t.same(lines, [{ level: 40, endpoint: 'http://collector:4318/v1/traces', cause: 'connection refused', spans: 0, failures: 1, msg: 'trace export failed' }])
  t.same(results.map(result => result.code), [ExportResultCode.FAILED, ExportResultCode.FAILED, ExportResultCode.FAILED], 'the processor gets each result')
  await sleep(210) // the interval itself: the next failure may be logged
  exportOnce()
  t.equal(counted, 4)
  t.equal(lines.length, 2)
  t.match(lines[1], { cause: 'connection refused', failures: 3 }, 'the two failures not logged, and this one')
})

t.test('describeExportError: the HTTP status, or the network error in words', async t => {
  t.equal(describeExportError(Object.assign(new Error('Service Unavailable'), { code: 503 })), 'status 503 Service Unavailable')
  t.equal(describeExportError(Object.assign(new Error(''), { code: 404 })), 'status 404')
  t.equal(describeExportError(Object.assign(new Error('getaddrinfo ENOTFOUND otel-collector.observability'), { code: 'ENOTFOUND' })), 'host not found')
  t.equal(describeExportError(new Error('Request timed out')), 'Request timed out')
  t.equal(describeExportError(undefined), 'unknown')
})
