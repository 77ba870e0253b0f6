import { randomBytes } from 'node:crypto'
import t from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { type OtlpReceiver, parseTraceparent, type ReceivedSpan, startOtlpReceiver } from '../helpers/otlp-receiver.ts'
import { eventually, type Harness, sidecarFor, startTestServer, type TestHandler, type TestServer } from '../helpers/sidecar-harness.ts'
import { closedPort, type ReceiverAction, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'

// docs/tracing.md, "The spans": the caller's trace context continued, one server span per /v4
// call with a `queue` child and a client span for the app request, one client span per webhook
// attempt, async runs under their submitter's trace; exported over OTLP/HTTP to a real receiver
// here.

const ROUTE = '/v4/{project_id}/{app_name}/…'
const SERVER = 2
const CLIENT = 3
const INTERNAL = 1
const hex = (bytes: number): string => randomBytes(bytes).toString('hex')

const json = (body: unknown): TestHandler => (_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body))
}

interface Setup { readonly otlp: OtlpReceiver, readonly app: TestServer, readonly receiver: WebhookReceiver, readonly h: Harness }

/**
 * An OTLP receiver, an app (`app`, else `{"ok":true}`), a webhook receiver answering `webhook`,
 * and a ready sidecar in front of the app exporting to the receiver (unless `traced` is false);
 * everything closed when `t` ends.
 */
async function setUp (t: { teardown: (fn: () => unknown) => void }, env: Record<string, string> = {},
  options: { traced?: boolean, app?: TestHandler, webhook?: ReceiverAction } = {}): Promise<Setup> {
  const otlp = await startOtlpReceiver()
  t.teardown(() => otlp.close())
  const app = await startTestServer(options.app ?? json({ ok: true }))
  t.teardown(() => app.close())
  const receiver = await startWebhookReceiver([], options.webhook ?? 200)
  t.teardown(() => receiver.close())
  const h = await sidecarFor(t, app.url, {
    DISABLE_AUTH: 'true', OTEL_BSP_SCHEDULE_DELAY: '20', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8',
    ...(options.traced === false ? {} : { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url }),
    ...env
  })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  return { otlp, app, receiver, h }
}

t.test('a call with the caller\'s traceparent: server, queue and app client spans, the app and the webhook under them', async t => {
  const { otlp, app, receiver, h } = await setUp(t)

  const traceId = hex(16)
  const callerSpan = hex(8)
  const response = await send(`${h.base}/v4/proj/app/predict?webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': 'traced-1', traceparent: `00-${traceId}-${callerSpan}-01`, tracestate: 'vendor=abc' },
    body: '{}'
  })
  t.equal(response.status, 200)
  const [delivery] = await receiver.waitForAttempts(1)

  const ofTrace = (span: ReceivedSpan): boolean => span.traceId === traceId
  const spans = await otlp.waitFor(ofTrace, 4)
  t.equal(spans.length, 4, 'server, queue, app client, webhook attempt')
  const server = spans.find(span => span.kind === SERVER) as ReceivedSpan
  const queue = spans.find(span => span.name === 'queue') as ReceivedSpan
  const clients = spans.filter(span => span.kind === CLIENT)
  const appSpan = clients.find(span => span.attributes['server.port'] === app.port) as ReceivedSpan
  const attempt = clients.find(span => span.attributes['server.port'] === receiver.port) as ReceivedSpan

  t.equal(server.name, `POST ${ROUTE}`)
  t.equal(server.parentSpanId, callerSpan, 'the caller\'s span is the server span\'s parent')
  t.same(server.attributes, { 'http.request.method': 'POST', 'http.route': ROUTE, 'http.response.status_code': 200, run_id: 'traced-1' })
  t.equal(server.service, 'app-sidecar', 'OTEL_SERVICE_NAME defaults to app-sidecar')
  t.equal(queue.kind, INTERNAL)
  t.equal(queue.parentSpanId, server.spanId)
  t.ok(queue.startNs >= server.startNs && queue.endNs <= server.endNs, 'the queue span lies within the call')
  t.equal(appSpan.name, 'POST')
  t.equal(appSpan.parentSpanId, server.spanId)
  t.same(appSpan.attributes, { 'http.request.method': 'POST', 'server.address': '127.0.0.1', 'server.port': app.port, 'http.response.status_code': 200 })

  const atApp = parseTraceparent(app.requests[0]?.headers.traceparent)
  t.same(atApp, { traceId, parentId: appSpan.spanId, flags: '01' }, 'the app\'s traceparent names the sidecar\'s client span')
  t.equal(app.requests[0]?.headers.tracestate, 'vendor=abc', 'tracestate carried on')

  t.equal(attempt.name, 'POST')
  t.equal(attempt.parentSpanId, server.spanId, 'the webhook attempt is a child of the call')
  t.same(attempt.attributes, {
    'http.request.method': 'POST', 'server.address': '127.0.0.1', 'server.port': receiver.port, 'url.full': `${receiver.url}/hook`,
    'http.request.resend_count': 0, run_id: 'traced-1', 'http.response.status_code': 200
  })
  t.same(parseTraceparent(delivery?.headers.traceparent), { traceId, parentId: attempt.spanId, flags: '01' }, 'the webhook carries its attempt span')
  t.ok(otlp.exports.length > 0 && otlp.exports.every(type => type === 'application/x-protobuf'), 'OTLP/HTTP with protobuf, the OTLP default')
})

t.test('OTEL_EXPORTER_OTLP_PROTOCOL=http/json: the same spans, as JSON', async t => {
  const { otlp, h } = await setUp(t, { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })
  const traceId = hex(16)
  t.equal((await send(`${h.base}/v4/proj/app/x`, { headers: { 'x-request-id': 'json-1', traceparent: `00-${traceId}-${hex(8)}-01` } })).status, 200)
  const spans = await otlp.waitFor(span => span.traceId === traceId, 3)
  t.same(spans.map(span => span.name).sort(), ['GET', `GET ${ROUTE}`, 'queue'])
  t.equal(spans.find(span => span.kind === SERVER)?.attributes.run_id, 'json-1')
  t.ok(otlp.exports.length > 0 && otlp.exports.every(type => type === 'application/json'), 'OTLP/HTTP with JSON')
})

t.test('a call without trace context starts a trace; a 502 and failed webhook attempts are errors', async t => {
  const fine = json({ ok: true })
  const { otlp, app, receiver, h } = await setUp(t, { OTEL_SERVICE_NAME: 'gpu-sidecar', RUNTIME: 'custom' }, {
    webhook: 500,
    app: (req, res, body) => {
      if (req.url === '/broken') { req.socket.destroy(); return }
      void fine(req, res, body)
    }
  })

  const ok = await send(`${h.base}/v4/proj/app/fine`, { headers: { 'x-request-id': 'fresh-1' } })
  t.equal(ok.status, 200)
  const [server] = await otlp.waitFor(span => span.kind === SERVER && span.attributes.run_id === 'fresh-1')
  t.equal(server?.parentSpanId, '', 'a root span')
  t.equal(server?.service, 'gpu-sidecar')
  const atApp = parseTraceparent(app.requests[0]?.headers.traceparent)
  t.equal(atApp.traceId, server?.traceId, 'the app joins the sidecar\'s trace')

  const broken = await send(`${h.base}/v4/proj/app/broken?webhookEndpoint=${encodeURIComponent(receiver.url)}`, { headers: { 'x-request-id': 'broken-1' } })
  t.equal(broken.status, 502)
  const [failed] = await otlp.waitFor(span => span.kind === SERVER && span.attributes.run_id === 'broken-1')
  t.equal(failed?.attributes['http.response.status_code'], 502)
  t.equal(failed?.statusCode, 2, 'a 5xx server span is an error')
  const [appSpan] = await otlp.waitFor(span => span.kind === CLIENT && span.parentSpanId === failed?.spanId && span.attributes['server.port'] === app.port)
  t.equal(appSpan?.statusCode, 2, 'the app request failed')
  t.equal(appSpan?.attributes['error.type'], 'network')
  t.equal(appSpan?.attributes['http.response.status_code'], undefined, 'no status: the app never answered')
  const attempt = await otlp.waitFor(span => span.attributes.run_id === 'broken-1' && span.attributes['server.port'] === receiver.port)
  t.equal(attempt[0]?.attributes['http.response.status_code'], 500)
  t.equal(attempt[0]?.statusCode, 2, 'a 500 from the receiver is an error')
})

t.test('an async run keeps its submitter\'s trace', async t => {
  const { otlp, app, h } = await setUp(t, {}, { app: json({ ran: true }) })
  const traceId = hex(16)
  const submitted = await send(`${h.base}/v4/proj/app/later?async=true`, {
    method: 'POST', headers: { 'x-request-id': 'async-1', traceparent: `00-${traceId}-${hex(8)}-01`, 'content-type': 'application/json' }, body: '{}'
  })
  t.equal(submitted.status, 202)
  const spans = await otlp.waitFor(span => span.traceId === traceId, 2)
  const server = spans.find(span => span.kind === SERVER) as ReceivedSpan
  const run = spans.find(span => span.kind === CLIENT) as ReceivedSpan
  t.equal(server.attributes['http.response.status_code'], 202)
  t.equal(run.parentSpanId, server.spanId, 'the run\'s app request is a child of the submitting call')
  t.same(run.attributes, { 'http.request.method': 'POST', run_id: 'async-1', 'http.response.status_code': 200 })
  await eventually(() => app.requests.length === 1)
  t.same(parseTraceparent(app.requests[0]?.headers.traceparent), { traceId, parentId: run.spanId, flags: '01' })
})

t.test('OTEL_TRACES_SAMPLER=always_off: nothing exported, the app still gets a (not sampled) traceparent of the same trace', async t => {
  const { otlp, app, h } = await setUp(t, { OTEL_TRACES_SAMPLER: 'always_off' })
  const traceId = hex(16)
  const caller = hex(8)
  t.equal((await send(`${h.base}/v4/proj/app/x`, { headers: { traceparent: `00-${traceId}-${caller}-01` } })).status, 200)
  const atApp = parseTraceparent(app.requests[0]?.headers.traceparent)
  t.equal(atApp.traceId, traceId)
  t.equal(atApp.flags, '00')
  t.not(atApp.parentId, caller)
  await h.close() // flushes the processor: had anything been recorded, it would be sent now
  t.same(otlp.exports, [], 'no export at all')
})

t.test('a collector that is down fails no call and holds none up', async t => {
  const { h } = await setUp(t, { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${await closedPort()}` })
  const answers = await Promise.all(Array.from({ length: 50 }, async (_, n) => await send(`${h.base}/v4/proj/app/x`, { headers: { 'x-request-id': `down-${n}` } })))
  t.same(answers.map(answer => answer.status), Array.from({ length: 50 }, () => 200))
  // exports to the closed port go out every 20 ms meanwhile; the exporter tries a refused connection
  // again for seconds before an export counts as failed: a call that waited on one would come after that
  await new Promise(resolve => setTimeout(resolve, 200))
  const again = await send(`${h.base}/v4/proj/app/x`)
  t.equal(again.status, 200)
  t.equal(await metric(h, 'sidecar_trace_export_failures_total'), 0, 'the calls were not held up by failed exports: all answered before the first export failed')
})

t.test('without OTEL_EXPORTER_OTLP_ENDPOINT: traceparent and tracestate pass through unchanged, to the app and the webhook', async t => {
  const { otlp, app, receiver, h } = await setUp(t, {}, { traced: false })
  const traceparent = `00-${hex(16)}-${hex(8)}-01`
  const response = await send(`${h.base}/v4/proj/app/x?webhookEndpoint=${encodeURIComponent(receiver.url)}`, { headers: { traceparent, tracestate: 'a=1' } })
  t.equal(response.status, 200)
  t.equal(app.requests[0]?.headers.traceparent, traceparent)
  t.equal(app.requests[0]?.headers.tracestate, 'a=1')
  const [delivery] = await receiver.waitForAttempts(1)
  t.equal(delivery?.headers.traceparent, traceparent, 'the webhook carries the caller\'s trace as sent')
  t.equal(delivery?.headers.tracestate, 'a=1')
  const plain = await send(`${h.base}/v4/proj/app/y`)
  t.equal(plain.status, 200)
  t.equal(app.requests[1]?.headers.traceparent, undefined, 'no trace context is made up')
  t.same(otlp.spans, [])
})
