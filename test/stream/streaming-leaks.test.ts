import t from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { eventually, type Harness, startHarness } from '../helpers/sidecar-harness.ts'
import { openStream, readStream, type ScriptedApp, startScriptedApp } from './sse-test-kit.ts'

// A thousand callers that each read one event and hang up: every stream, app request, gauge,
// drain slot and app connection must be released.

let app: ScriptedApp
let h: Harness

t.before(async () => {
  app = await startScriptedApp()
  h = await startHarness(app.url, { DISABLE_AUTH: 'true', SSE_HEARTBEAT_SECONDS: '0.05' })
})
t.teardown(async () => {
  await h.close()
  await app.close()
})

const SSE = 'text/event-stream'
const MODES = [
  { headers: { 'content-type': SSE }, accept: undefined, unit: 'data: {"first":true}\n\n' },
  { headers: { 'content-type': 'application/x-ndjson' }, accept: undefined, unit: '{"first":true}\n' },
  { headers: { 'content-type': 'text/plain' }, accept: SSE, unit: '{"first":true}' }
] as const

const appConnections = (): Promise<number> => new Promise((resolve, reject) => {
  app.server.getConnections((error, count) => { if (error === null) resolve(count); else reject(error) })
})

t.test('1,000 streams opened and dropped after their first event leave nothing behind', async t => {
  const STREAMS = 1000
  const BATCH = 100
  let opened = 0
  let closed = 0
  const paths = MODES.map(mode => app.route(t, (_req, res) => {
    opened++
    res.once('close', () => { closed++ })
    res.writeHead(200, mode.headers)
    res.write(mode.unit) // then hold the stream open (heartbeats only) until the caller goes
  }))
  const eventsBefore = await metric(h, 'sidecar_sse_events_total')
  const requestsBefore = app.requests.length
  let firstEvents = 0
  for (let batch = 0; batch < STREAMS / BATCH; batch++) {
    await Promise.all(Array.from({ length: BATCH }, async (_, i) => {
      const n = batch * BATCH + i
      const mode = MODES[n % 3] as typeof MODES[number]
      const s = await openStream(`${h.base}/v4/proj/app${paths[n % 3] as string}`, mode.accept === undefined ? {} : { accept: mode.accept })
      await s.waitForEvents(1)
      if (s.events[0]?.data === '{"first":true}') firstEvents++
      s.req.destroy()
    }))
  }
  t.equal(firstEvents, STREAMS, 'every caller read its first event')
  t.equal(app.requests.length - requestsBefore, STREAMS, 'the app saw every request')
  await eventually(() => closed === STREAMS, 10_000)
  t.equal(opened, STREAMS)
  t.equal(closed, STREAMS, 'the app saw every request close')
  await eventually(() => h.sidecar.inflight.count === 0)
  t.equal(h.sidecar.inflight.count, 0, 'no drain slot left')
  await eventually(async () => await metric(h, 'sidecar_sse_streams') === 0)
  t.equal(await metric(h, 'sidecar_sse_streams'), 0)
  t.equal(await metric(h, 'sidecar_inflight_requests'), 0)
  t.equal(await metric(h, 'sidecar_sse_events_total') - eventsBefore, STREAMS, 'one event counted per stream')
  // the aborted app requests took their connections with them (probes may open one for a moment)
  await eventually(async () => await appConnections() === 0, 5000)
  t.equal(await appConnections(), 0, 'the app has no open connection')
  const lines = h.logs.filter(line => line.msg === 'request' && line.status === 200 && line.aborted === true)
  t.equal(lines.length, STREAMS, 'one access line per dropped stream')

  // and the sidecar still streams
  const ok = app.route(t, (_req, res) => { res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('"after"\n') })
  const s = await readStream(`${h.base}/v4/proj/app${ok}`)
  t.same(s.events.map(e => e.data), ['"after"'])
})
