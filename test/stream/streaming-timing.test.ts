import { performance } from 'node:perf_hooks'
import { EventSource } from 'eventsource'
import t from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { eventually, type Harness, startHarness } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'
import { doneFrame, openStream, type OpenStream, type ScriptedApp, startScriptedApp, type Step, MODES, type Mode } from './sse-test-kit.ts'

// When bytes reach the caller: headers at once, every event as soon as the app made it,
// keep-alive comments only where the stream is idle (and never inside a line), and nothing lost
// when the caller reads slowly. No stopwatch: the app waits for what the caller must have seen
// before it goes on (its headers, the last event, keep-alive comments), so a sidecar that held
// anything back would make the app wait in vain (a busy machine only makes it all slower).

let app: ScriptedApp
let h: Harness
let hb: Harness
let token: string

t.before(async () => {
  app = await startScriptedApp()
  h = await startHarness(app.url, { RUNTIME: 'custom' })
  hb = await startHarness(app.url, { SSE_HEARTBEAT_SECONDS: '0.2' })
  token = await h.token('proj')
})
t.teardown(async () => {
  await h.close()
  await hb.close()
  await app.close()
})

type TestLike = Parameters<ScriptedApp['route']>[0]
const auth = (h: Harness): Promise<Record<string, string>> => h.token('proj').then(tk => ({ authorization: `Bearer ${tk}` }))


/** A step of a timed route: bytes to write, a pause in ms, or a gate: what the caller must have seen before the app goes on. */
type TimedStep = Step | (() => Promise<void>)

/** A gate that opens once `seen` holds (or after 30 s, when the checks that follow say what was missing). */
const until = (seen: () => boolean): () => Promise<void> => async () => { await eventually(seen, 30_000).catch(() => {}) }

/** A route that sends headers at once, plays `steps` (with `writes` recording when each write happened), and ends. */
function timedRoute (t: TestLike, mode: Mode, steps: TimedStep[]): { path: string, writes: number[] } {
  const writes: number[] = []
  const path = app.route(t, async (_req, res) => {
    res.writeHead(200, mode.headers)
    res.flushHeaders()
    for (const step of steps) {
      if (res.destroyed) return
      if (typeof step === 'number') await sleep(step)
      else if (typeof step === 'function') await step()
      else { res.write(step); writes.push(performance.now()) }
    }
    res.end()
  })
  return { path, writes }
}

/** The number of keep-alive comments `stream` (once open) has read. */
const commentsOf = (stream: OpenStream | undefined): number => stream?.comments.length ?? 0

t.test('headers are flushed before the first event (eventsource client)', async t => {
  await Promise.all(MODES.map(async mode => {
    let openedAt = 0
    let writtenAtOpen = -1
    const messages: Array<{ data: string, at: number }> = []
    // the app writes its first event only once the caller has opened: held headers would hold it forever
    const route = timedRoute(t, mode, [until(() => openedAt > 0), mode.unit('{"n":1}'), until(() => messages.length === 1), mode.unit('{"n":2}')])
    const authorization = `Bearer ${token}`
    const source = new EventSource(`${h.base}/v4/proj/app${route.path}`, {
      fetch: (url, init) => fetch(url, { ...init, headers: { ...init.headers, authorization } })
    })
    t.teardown(() => { source.close() })
    await new Promise<void>((resolve, reject) => {
      source.onopen = () => { openedAt = performance.now(); writtenAtOpen = route.writes.length }
      source.onmessage = event => {
        messages.push({ data: event.data as string, at: performance.now() })
        if (messages.length === 2) { source.close(); resolve() }
      }
      source.onerror = event => { reject(new Error(`EventSource error: ${String(event.message)}`)) }
    })
    t.ok(openedAt > 0, `${mode.name}: opened`)
    t.equal(writtenAtOpen, 0, `${mode.name}: open before the app wrote its first event`)
    t.same(messages.map(m => m.data), ['{"n":1}', '{"n":2}'], `${mode.name}: data in order`)
    const first = messages[0] as { at: number }
    t.ok(first.at >= (route.writes[0] as number), `${mode.name}: the first event left the app before it arrived`)
  }))
})

t.test('headers are flushed before the first event (raw http response event)', async t => {
  let read = false
  // the app writes only once the caller has read the status and headers
  const route = timedRoute(t, MODES[1], [until(() => read), '"late"\n'])
  const s = await openStream(`${h.base}/v4/proj/app${route.path}`, await auth(h))
  t.teardown(() => { s.req.destroy() })
  t.equal(s.status, 200)
  t.equal(s.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(route.writes.length, 0, 'status and headers before the app wrote anything')
  t.equal(s.chunks.length, 0, 'no body bytes yet')
  read = true
  await s.done
  t.same(s.events.map(e => e.data), ['"late"'])
})

t.test('no batching: each event reaches the caller as soon as the app produced it', async t => {
  await Promise.all(MODES.map(async mode => {
    // lock-step: the app writes each event only once the caller has the one before; a sidecar that
    // held an event back for more would keep the app waiting
    let stream: OpenStream | undefined
    const steps: TimedStep[] = []
    for (let i = 0; i < 6; i++) steps.push(...(i === 0 ? [] : [until(() => (stream?.events.length ?? 0) >= i)]), mode.unit(`{"i":${i}}`))
    const route = timedRoute(t, mode, steps)
    const s = stream = await openStream(`${h.base}/v4/proj/app${route.path}`, { ...await auth(h), ...(mode.accept === undefined ? {} : { accept: mode.accept }) })
    await s.done
    t.same(s.events.map(e => e.data), [0, 1, 2, 3, 4, 5].map(i => `{"i":${i}}`), `${mode.name}: six events in order`)
    t.equal(route.writes.length, 6, `${mode.name}: the app wrote six`)
    const late = [0, 1, 2, 3, 4].filter(i => !((s.events[i]?.at ?? Infinity) <= (route.writes[i + 1] as number)))
    t.same(late, [], `${mode.name}: each event reached the caller before the app wrote the next`)
  }))
})

t.test('an idle stream gets keep-alive comments between events; the parser sees only the events', async t => {
  await Promise.all(MODES.map(async mode => {
    // idle until the caller has read two keep-alive comments (SSE_HEARTBEAT_SECONDS 0.2)
    let stream: OpenStream | undefined
    const route = timedRoute(t, mode, [mode.unit('first'), until(() => commentsOf(stream) >= 2), mode.unit('second')])
    const s = stream = await openStream(`${hb.base}/v4/proj/app${route.path}`, { ...await auth(hb), ...(mode.accept === undefined ? {} : { accept: mode.accept }) })
    await s.done
    t.same(s.events.map(e => e.data), ['first', 'second'], `${mode.name}: only the real events`)
    const end = mode.converted ? doneFrame(s.headers['x-request-id'] as string) : ''
    t.ok(s.raw().endsWith('data: second\n\n' + end), `${mode.name}: the stream's end`)
    t.match(s.raw().slice(0, s.raw().length - end.length), /^data: first\n\n(: keep-alive\n\n){2,5}data: second\n\n$/, `${mode.name}: comments between the events`)
    t.ok(s.comments.length >= 2 && s.comments.every(c => c === 'keep-alive'), `${mode.name}: ${s.comments.length} keep-alive comments`)
  }))
})

t.test('a stream idle from the start gets keep-alive comments before its first event', async t => {
  let stream: OpenStream | undefined
  const route = timedRoute(t, MODES[1], [until(() => commentsOf(stream) >= 1), '1\n'])
  const s = stream = await openStream(`${hb.base}/v4/proj/app${route.path}`, await auth(hb))
  await s.done
  const end = doneFrame(s.headers['x-request-id'] as string)
  t.ok(s.raw().endsWith('data: 1\n\n' + end), 'the run\'s done frame ends the stream')
  t.match(s.raw().slice(0, -end.length), /^(: keep-alive\n\n){1,4}data: 1\n\n$/)
  t.same(s.events.map(e => e.data), ['1'])
})

t.test('passthrough: a keep-alive comment is never inserted inside a line', async t => {
  // IDLE: until the caller has read two keep-alive comments (SSE_HEARTBEAT_SECONDS 0.2); mid-line,
  // where none may come, only time passing (700 ms: three heartbeats) shows that none came
  const IDLE = 'idle'
  const cases: Array<{ steps: Array<Step | typeof IDLE>, raw: RegExp, events: string[] }> = [
    // mid-line: nothing may be inserted at all
    { steps: ['data: par', 700, 'tial\n\n'], raw: /^data: partial\n\n$/, events: ['partial'] },
    // a CR at a read boundary may be half of a CRLF: a comment after it could end the event early
    { steps: ['data: a\r', 700, '\ndata: b\r\n\r\n'], raw: /^data: a\r\ndata: b\r\n\r\n$/, events: ['a\nb'] },
    // after a whole line inside an event: only a comment line, no blank line (that would end the event)
    { steps: ['data: a\n', IDLE, 'data: b\n\n'], raw: /^data: a\n(: keep-alive\n){2,5}data: b\n\n$/, events: ['a\nb'] },
    { steps: ['data: a\r\n', IDLE, 'data: b\r\n\r\n'], raw: /^data: a\r\n(: keep-alive\n){2,5}data: b\r\n\r\n$/, events: ['a\nb'] },
    // the blank line ending an event arrives on its own
    { steps: ['data: a\n', 50, '\n', IDLE, 'data: b\n\n'], raw: /^data: a\n\n(: keep-alive\n\n){2,5}data: b\n\n$/, events: ['a', 'b'] }
  ]
  await Promise.all(cases.map(async (c, i) => {
    let stream: OpenStream | undefined
    const route = timedRoute(t, MODES[0], c.steps.map(step => step === IDLE ? until(() => commentsOf(stream) >= 2) : step))
    const s = stream = await openStream(`${hb.base}/v4/proj/app${route.path}`, await auth(hb))
    await s.done
    t.match(s.raw(), c.raw, `case ${i}: ${JSON.stringify(s.raw())}`)
    t.same(s.events.map(e => e.data), c.events, `case ${i}: events`)
  }))
})

t.test('backpressure: a caller that pauses reading loses nothing', async t => {
  // ~26 MB: more than loopback socket buffers hold (about 7 MB here), so the pause must reach the app
  const LINES = 120_000
  const pad = 'x'.repeat(200)
  const line = (i: number): string => `{"i":${i},"pad":"${pad}"}`
  let appWrittenWhilePaused = -1
  let written = 0
  let appSawBackpressure = 0
  const path = app.route(t, async (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/jsonl' })
    while (written < LINES && !res.destroyed) {
      let batch = ''
      for (let k = 0; k < 500 && written < LINES; k++) batch += line(written++) + '\n'
      if (!res.write(batch)) {
        appSawBackpressure++
        await new Promise(resolve => res.once('drain', resolve))
      }
    }
    res.end()
  })
  const warnings: string[] = []
  const onWarning = (w: Error): void => { warnings.push(w.name) }
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })

  const before = await metric(h, 'sidecar_sse_events_total')
  const s = await openStream(`${h.base}/v4/proj/app${path}`, await auth(h))
  t.teardown(() => { s.req.destroy() })
  await s.waitForEvents(1)
  s.res.pause()
  // only time shows the app is held back: unthrottled, it would write every line well within this pause
  await sleep(500)
  appWrittenWhilePaused = written
  const eventsWhilePaused = s.events.length
  s.res.resume()
  await s.done
  t.ok(eventsWhilePaused < LINES, `the caller had ${eventsWhilePaused} events when it resumed`)
  t.ok(appWrittenWhilePaused < LINES, `the app was held back at ${appWrittenWhilePaused} lines while the caller paused`)
  t.ok(appSawBackpressure > 0, `the app waited for drain ${appSawBackpressure} times`)
  t.equal(s.events.length, LINES, 'every line arrived')
  let outOfOrder = -1
  for (let i = 0; i < LINES; i++) {
    if (s.events[i]?.data !== line(i)) { outOfOrder = i; break }
  }
  t.equal(outOfOrder, -1, 'each event is its line, in order')
  t.equal(await metric(h, 'sidecar_sse_events_total') - before, LINES)
  t.same(warnings, [], 'no process warnings (e.g. MaxListenersExceeded from drain listeners)')
})
