import { performance } from 'node:perf_hooks'
import { request, type ServerResponse } from 'node:http'
import t from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { eventually, type Harness, startHarness } from '../helpers/sidecar-harness.ts'
import { patient, sleep } from '../helpers/timing.ts'
import { doneFrame, openStream, play, readStream, type ScriptedApp, startScriptedApp, type Step, MODES, type Mode } from './sse-test-kit.ts'

// Streams that end badly: the app dies mid-stream, the caller walks away, and a thousand callers
// walk away — nothing may be left behind.

let app: ScriptedApp
let h: Harness

t.before(async () => {
  app = await startScriptedApp()
  h = await startHarness(app.url)
})
t.teardown(async () => {
  await h.close()
  await app.close()
})

type TestLike = Parameters<ScriptedApp['route']>[0]
const headersFor = async (mode: Mode, extra: Record<string, string> = {}): Promise<Record<string, string>> => ({
  authorization: `Bearer ${await h.token('proj')}`,
  ...(mode.accept === undefined ? {} : { accept: mode.accept }),
  ...extra
})


/** A route that plays `steps` and then kills its connection without ending the response. */
function dyingRoute (t: TestLike, mode: Mode, steps: Step[]): string {
  return app.route(t, async (req, res) => {
    res.writeHead(200, mode.headers)
    await play(res, steps)
    await sleep(100)
    req.socket.destroy()
  })
}

/** A route that sends a unit every `every` ms until the caller's side goes; records when it went. */
function endlessRoute (t: TestLike, mode: Mode, every: number): { path: string, closedAt: () => number } {
  let closedAt = 0
  const path = app.route(t, async (_req, res: ServerResponse) => {
    res.once('close', () => { closedAt = performance.now() })
    res.writeHead(200, mode.headers)
    for (let i = 0; !res.destroyed; i++) {
      res.write(mode.unit(`{"tick":${i}}`))
      await sleep(every)
    }
  })
  return { path, closedAt: () => closedAt }
}

for (const mode of MODES) {
  t.test(`${mode.name}: an app that dies mid-stream ends the stream with event: error, after the events sent`, async t => {
    const path = dyingRoute(t, mode, [mode.unit('{"n":1}'), 50, mode.unit('{"n":2}')])
    const before = await metric(h, 'sidecar_sse_events_total')
    const s = await readStream(`${h.base}/v4/proj/app${path}`, await headersFor(mode, { 'x-request-id': `dies-${mode.name}` }))
    t.equal(s.status, 200)
    t.equal(s.res.complete, true, 'the stream was ended properly, not cut')
    t.same(s.events.slice(0, 2).map(e => [e.event, e.data]), [[undefined, '{"n":1}'], [undefined, '{"n":2}']])
    t.equal(s.events.length, 3)
    const last = s.events[2] as { event: string | undefined, data: string }
    t.equal(last.event, 'error')
    const payload = JSON.parse(last.data) as Record<string, unknown>
    t.same(Object.keys(payload), ['message'])
    t.match(payload.message, /^app failed mid-stream/)
    // a converted stream ends with its run's done frame after the error event; passthrough is the app's own stream
    t.ok(s.raw().endsWith(`event: error\ndata: ${last.data}\n\n${mode.converted ? doneFrame(`dies-${mode.name}`) : ''}`))
    t.equal(await metric(h, 'sidecar_sse_events_total') - before, 2, 'the app\'s two events are counted')
    await eventually(async () => await metric(h, 'sidecar_sse_streams') === 0)
    await eventually(() => h.logs.some(line => line.runId === `dies-${mode.name}`))
    const log = h.logs.filter(line => line.runId === `dies-${mode.name}`)
    t.equal(log.length, 1)
    t.equal(log[0]?.status, 200)

    // the sidecar keeps serving
    const okPath = app.route(t, (_req, res) => { res.writeHead(200, mode.headers).end(mode.unit('"fine"')) })
    const after = await readStream(`${h.base}/v4/proj/app${okPath}`, await headersFor(mode))
    t.same(after.events.map(e => [e.event, e.data]), [[undefined, '"fine"']])
  })
}

t.test('passthrough: an app that dies inside a line still ends with a well-formed error event', async t => {
  const path = dyingRoute(t, MODES[0], ['data: whole\n\n', 30, 'data: par'])
  const s = await readStream(`${h.base}/v4/proj/app${path}`, await headersFor(MODES[0]))
  const last = s.events[s.events.length - 1] as { event: string | undefined, data: string }
  t.equal(last.event, 'error')
  t.match((JSON.parse(last.data) as { message: string }).message, /^app failed mid-stream/)
  // SSE has no way to take back a started line: it is closed off before the error event
  t.same(s.events.map(e => e.data).slice(0, -1), ['whole', 'par'])
  t.match(s.raw(), /^data: whole\n\ndata: par\n\nevent: error\ndata: \{"message":"app failed mid-stream[^\n]*"\}\n\n$/)
})

for (const mode of MODES) {
  t.test(`${mode.name}: a caller that goes away aborts the app request at once`, async t => {
    const route = endlessRoute(t, mode, 50)
    const runId = `gone-${mode.name}`
    const s = await openStream(`${h.base}/v4/proj/app${route.path}`, await headersFor(mode, { 'x-request-id': runId }))
    await s.waitForEvents(2)
    t.equal(await metric(h, 'sidecar_sse_streams'), 1)
    const destroyedAt = performance.now()
    s.req.destroy()
    await eventually(() => route.closedAt() > 0, 2000)
    const took = route.closedAt() - destroyedAt
    // the route is endless: without the abort it would close never (or at a 15 s heartbeat), far past patient(500)
    t.ok(took < patient(500), `the app's response closed ${Math.round(took)} ms after the caller left`)
    await eventually(async () => await metric(h, 'sidecar_sse_streams') === 0)
    await eventually(async () => await metric(h, 'sidecar_inflight_requests') === 0)
    await eventually(() => h.sidecar.inflight.count === 0)
    await eventually(() => h.logs.some(line => line.runId === runId))
    const log = h.logs.filter(line => line.runId === runId)
    t.equal(log.length, 1)
    t.equal(log[0]?.status, 200)
    t.equal(log[0]?.aborted, true)
  })
}

t.test('a caller that goes away before the app answered aborts the app request too', async t => {
  let closedAt = 0
  let handling = false
  const path = app.route(t, async (_req, res) => {
    res.once('close', () => { closedAt = performance.now() })
    handling = true
    await sleep(30_000, { ref: false }) // far past patient(500): the app's own end cannot pass for the abort
    if (!res.destroyed) res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('1\n')
  })
  const req = request(`${h.base}/v4/proj/app${path}`, { headers: await headersFor(MODES[1]), agent: false })
  req.on('error', () => {})
  req.on('response', () => { t.fail('no response expected') })
  req.end()
  await eventually(() => handling) // the app holds the request, watching its close
  const destroyedAt = performance.now()
  req.destroy()
  await eventually(() => closedAt > 0, 2000)
  t.ok(closedAt - destroyedAt < patient(500), `the app's response closed ${Math.round(closedAt - destroyedAt)} ms after the caller left, not when the app was done`)
  await eventually(() => h.sidecar.inflight.count === 0)
  t.equal(await metric(h, 'sidecar_inflight_requests'), 0)
  t.equal(await metric(h, 'sidecar_sse_streams'), 0)
})
