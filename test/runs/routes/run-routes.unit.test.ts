import t, { type Test } from 'tap'
import {
  DeadlineExceededError, EventBeyondLastError, MalformedRequestError, MethodNotAllowedError, RunNotFoundError, RunStoreUnavailableError, TooManyReadersError
} from '../../../src/errors.ts'
import { CallsByRunId } from '../../../src/call/calls-by-run-id.ts'
import type { RunRoute } from '../../../src/runs/routes/run-route.ts'
import { createRunRoutes } from '../../../src/runs/routes/run-routes.ts'
import type { RunEventItem, RunStatus } from '../../../src/runs/run-data.ts'
import type { RunStore, RunStoreSettings } from '../../../src/runs/store/run-store.ts'
import type { CancelCause } from '../../../src/shared/metric-contracts.ts'
import { countingCounter, fakeCalls, type FakeCall } from '../../helpers/fake-call.ts'
import {
  type CountingStreamMetrics, countingStreamMetrics, finishedRun, held, iso, memoryStore, OTHER_SCOPE, queuedJson, queuedRun, refusal, runningRun,
  runRoute, SCOPE, storeWith, succeeded, succeededJson, unreachableStore, untouchableStore
} from './run-routes-kit.ts'

// The `_runs` stage (docs/runs.md): a run's record, its events as SSE (resumed with Last-Event-ID
// or ?after, at most RUN_MAX_READERS readers at once), its cancel and the app's list, each route
// with its methods.

const call = await fakeCalls(t)

interface Routes {
  readonly serve: ReturnType<typeof createRunRoutes>
  readonly metrics: CountingStreamMetrics
  readonly runsTotal: ReturnType<typeof countingCounter<RunStatus>>
  readonly cancels: ReturnType<typeof countingCounter<CancelCause>>
  readonly calls: CallsByRunId
}

function routes (store: RunStore, options: { maxReaders?: number, heartbeatMs?: number } = {}): Routes {
  const metrics = countingStreamMetrics()
  const runsTotal = countingCounter<RunStatus>()
  const cancels = countingCounter<CancelCause>()
  const calls = new CallsByRunId()
  const serve = createRunRoutes({ store, maxReaders: options.maxReaders ?? 10, heartbeatMs: options.heartbeatMs ?? 0, metrics, runsTotal, calls, cancels })
  return { serve, metrics, runsTotal, cancels, calls }
}

/** A store with runs in it, and the routes over it. */
function setup (t: Test, settings: Partial<RunStoreSettings> = {}, options: { maxReaders?: number, heartbeatMs?: number } = {}): Routes & { store: RunStore } {
  const store = memoryStore(t, settings)
  return { store, ...routes(store, options) }
}

/** A GET of run `runId`'s events. */
async function reader (runId: string, headers: Record<string, string> = {}, query = ''): Promise<FakeCall> {
  return await call({ method: 'GET', path: `/v4/p1/a1/_runs/${runId}/events${query === '' ? '' : `?${query}`}`, headers: { 'x-request-id': 'reader', ...headers } })
}

const eventFrame = (n: number, data: string): string => `id: ${n}\ndata: ${data}\n\n`
const doneFrame = (runId: string, recordJson: string): string => `id: ${runId}.done\nevent: done\ndata: ${recordJson}\n\n`
const errorFrame = (message: string): string => `event: error\ndata: ${JSON.stringify({ message })}\n\n`

t.test('GET a run: 200 with its record and result, the request\'s own run id; the stage answered (true)', async t => {
  const { store, serve } = setup(t)
  const base = Date.now()
  await finishedRun(store, 'r1', base)
  const c = await call({ method: 'GET', path: '/v4/p1/a1/_runs/r1', headers: { 'x-request-id': 'getter' } })
  t.equal(await serve(c, runRoute('record', 'r1')), true)
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, succeededJson('r1', base))
  t.equal(got?.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(got?.headers['content-length'], String(got?.body.length))
  t.equal(got?.headers['x-request-id'], 'getter')
  t.same(c.answered, [])
})

t.test('GET a queued and a running run; HEAD: the headers alone', async t => {
  const { store, serve } = setup(t)
  const base = Date.now()
  await runningRun(store, 'running', base)
  await queuedRun(store, 'queued', base + 1)
  const running = await call({ method: 'GET', path: '/v4/p1/a1/_runs/running' })
  await serve(running, runRoute('record', 'running'))
  t.equal((await running.got)?.body, `{"run_id":"running","status":"running","created_at":"${iso(base)}","started_at":"${iso(base + 5)}","queue_time_ms":5}`)
  const head = await call({ method: 'HEAD', path: '/v4/p1/a1/_runs/queued' })
  t.equal(await serve(head, runRoute('record', 'queued')), true)
  const got = await head.got
  t.equal(got?.status, 200)
  t.equal(got?.body, '')
  t.equal(got?.headers['content-length'], String(queuedJson('queued', base + 1).length))
})

t.test('GET a run not held, or another app\'s: 404', async t => {
  const { store, serve } = setup(t)
  await queuedRun(store, 'theirs', Date.now(), OTHER_SCOPE)
  for (const runId of ['nobody', 'theirs']) {
    const c = await call({ method: 'GET', path: `/v4/p1/a1/_runs/${runId}` })
    const { error, got } = await refusal(c, serve(c, runRoute('record', runId)))
    t.type(error, RunNotFoundError, runId)
    t.equal(got?.status, 404, runId)
    t.equal(got?.body, '{"message":"no such run"}', runId)
  }
})

t.test('a store that cannot be reached: 503 with Retry-After for a record and for events (no stream begun)', async t => {
  const { serve, metrics } = routes(unreachableStore(memoryStore(t)))
  for (const [action, path] of [['record', '/v4/p1/a1/_runs/r1'], ['events', '/v4/p1/a1/_runs/r1/events']] as const) {
    const c = await call({ method: 'GET', path })
    const { error, got } = await refusal(c, serve(c, runRoute(action, 'r1')))
    t.type(error, RunStoreUnavailableError, action)
    t.equal(got?.status, 503, action)
    t.equal(got?.headers['retry-after'], '1', action)
    t.equal(got?.headers['content-type'], 'application/json; charset=utf-8', action)
    t.equal(got?.body, '{"message":"run store unavailable"}', action)
  }
  t.equal(metrics.open + metrics.sent, 0)
})

t.test('a caller that left while the record was read is not answered', async t => {
  const store = memoryStore(t)
  await queuedRun(store, 'r1')
  const gate = held<void>()
  const { serve } = routes(storeWith(store, { records: { get: async (scope, runId) => { await gate.promise; return await store.records.get(scope, runId) } } }))
  const c = await call({ method: 'GET', path: '/v4/p1/a1/_runs/r1' })
  const serving = serve(c, runRoute('record', 'r1'))
  const closed = new Promise(resolve => c.res.once('close', resolve))
  c.leave()
  await closed
  gate.resolve()
  t.equal(await serving, true)
  t.equal(c.res.headersSent, false)
  t.equal(await c.got, undefined)
})

t.test('a method a route does not take: 405 with the Allow list, before the store is asked', async t => {
  const { serve } = routes(untouchableStore(memoryStore(t)))
  const cases: Array<[RunRoute['action'], string[], string]> = [
    ['record', ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'], 'GET, HEAD'],
    ['events', ['HEAD', 'POST', 'PUT', 'DELETE'], 'GET'],
    ['cancel', ['GET', 'HEAD', 'PUT', 'DELETE'], 'POST'],
    ['list', ['POST', 'PUT', 'PATCH', 'OPTIONS'], 'GET, HEAD, DELETE']
  ]
  for (const [action, methods, allow] of cases) {
    for (const method of methods) {
      const c = await call({ method, path: '/v4/p1/a1/_runs/r1', headers: { 'x-request-id': 'wrong-method' } })
      const { error, got } = await refusal(c, serve(c, runRoute(action, action === 'list' ? '' : 'r1')))
      t.type(error, MethodNotAllowedError, `${method} ${action}`)
      t.equal(got?.status, 405, `${method} ${action}`)
      t.equal(got?.headers.allow, allow, `${method} ${action}`)
      t.equal(got?.headers['x-request-id'], 'wrong-method')
      if (method !== 'HEAD') t.equal(got?.body, '{"message":"method not allowed"}', `${method} ${action}`)
    }
  }
})

t.test('events of a finished run: each kept event with its id, then `done` with the record and the id <run_id>.done; the stream ends', async t => {
  const { store, serve, metrics } = setup(t)
  const base = Date.now()
  await finishedRun(store, 'r1', base, ['{"n":0}', '{"n":1}', 'two'])
  const c = await reader('r1')
  t.equal(await serve(c, runRoute('events', 'r1')), true)
  t.equal(c.forwarded, true, 'the stream answers from its first byte on')
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(got?.headers['cache-control'], 'no-cache')
  t.equal(got?.headers['x-accel-buffering'], 'no')
  t.equal(got?.headers['x-request-id'], 'reader')
  t.equal(got?.headers['content-length'], undefined)
  t.equal(got?.body, eventFrame(0, '{"n":0}') + eventFrame(1, '{"n":1}') + eventFrame(2, 'two') + doneFrame('r1', succeededJson('r1', base)))
  t.equal(metrics.sent, 4, 'three events and done')
  await metrics.until(m => m.open === 0)
  t.equal(metrics.open, 0, 'the stream is counted closed')
})

t.test('a run that is not a stream: only `done`; a multi-line event: one data line per line', async t => {
  const { store, serve } = setup(t)
  const base = Date.now()
  await finishedRun(store, 'plain', base)
  await finishedRun(store, 'lines', base, ['a\nb\r\nc\rd'])
  const plain = await reader('plain')
  await serve(plain, runRoute('events', 'plain'))
  t.equal((await plain.got)?.body, doneFrame('plain', succeededJson('plain', base)))
  const lines = await reader('lines')
  await serve(lines, runRoute('events', 'lines'))
  t.equal((await lines.got)?.body, 'id: 0\ndata: a\ndata: b\ndata: c\ndata: d\n\n' + doneFrame('lines', succeededJson('lines', base)))
})

t.test('events of a running run: the kept ones, then live ones as they come, then done', async t => {
  const { store, serve, metrics } = setup(t)
  const base = Date.now()
  const run = await runningRun(store, 'live', base)
  store.records.appendEvent(run, 0, 'kept')
  const c = await reader('live')
  const serving = serve(c, runRoute('events', 'live'))
  await metrics.until(m => m.sent === 1)
  store.records.appendEvent(run, 1, 'first live')
  await metrics.until(m => m.sent === 2)
  store.records.appendEvent(run, 2, 'second live')
  await metrics.until(m => m.sent === 3)
  const view = await store.records.finish(run, succeeded(run, '["kept","first live","second live"]'))
  t.equal(await serving, true)
  t.equal((await c.got)?.body, eventFrame(0, 'kept') + eventFrame(1, 'first live') + eventFrame(2, 'second live') +
    doneFrame('live', succeededJson('live', base, '["kept","first live","second live"]')))
  t.equal(view.record.status, 'succeeded')
})

t.test('resume: Last-Event-ID n or ?after=n starts after event n; the header wins', async t => {
  const { store, serve } = setup(t)
  const base = Date.now()
  await finishedRun(store, 'r1', base, ['e0', 'e1', 'e2'])
  const done = doneFrame('r1', succeededJson('r1', base))
  const cases: Array<[string, Record<string, string>, string, string]> = [
    ['Last-Event-ID: 0', { 'last-event-id': '0' }, '', eventFrame(1, 'e1') + eventFrame(2, 'e2') + done],
    ['Last-Event-ID: 2 (the last)', { 'last-event-id': '2' }, '', done],
    ['?after=1', {}, 'after=1', eventFrame(2, 'e2') + done],
    ['?after=0 among other parameters', {}, 'x=1&after=0&y=2', eventFrame(1, 'e1') + eventFrame(2, 'e2') + done],
    ['a query without after: from the first', {}, 'x=1', eventFrame(0, 'e0') + eventFrame(1, 'e1') + eventFrame(2, 'e2') + done],
    ['the header wins over ?after', { 'last-event-id': '1' }, 'after=0', eventFrame(2, 'e2') + done],
    ['the header wins over a bad ?after', { 'last-event-id': '1' }, 'after=bad', eventFrame(2, 'e2') + done],
    ['leading zeros', { 'last-event-id': '001' }, '', eventFrame(2, 'e2') + done],
    ['spaces around ?after are trimmed', {}, 'after=%201%20', eventFrame(2, 'e2') + done]
  ]
  for (const [name, headers, query, body] of cases) {
    const c = await reader('r1', headers, query)
    await serve(c, runRoute('events', 'r1', query))
    t.equal((await c.got)?.body, body, name)
  }
})

t.test('a bad Last-Event-ID or ?after: 400, before the store is asked', async t => {
  const { serve } = routes(untouchableStore(memoryStore(t)))
  const header = 'Last-Event-ID must be an event number (0, 1, 2, …)'
  const after = 'after must be an event number (0, 1, 2, …)'
  const cases: Array<[Record<string, string>, string, string]> = [
    [{ 'last-event-id': '' }, '', header],
    [{ 'last-event-id': 'abc' }, '', header],
    [{ 'last-event-id': '-1' }, '', header],
    [{ 'last-event-id': '1.5' }, '', header],
    [{ 'last-event-id': '1e3' }, '', header],
    [{ 'last-event-id': '0x10' }, '', header],
    [{ 'last-event-id': 'r1.done' }, '', header],
    [{ 'last-event-id': '1234567890123456' }, '', header],
    [{}, 'after=', after],
    [{}, 'after=-1', after],
    [{}, 'after=one', after],
    [{}, 'after=1%200', after],
    [{}, 'after=9007199254740993', after],
    [{}, 'after=x&after=1', after]
  ]
  for (const [headers, query, message] of cases) {
    const name = JSON.stringify([headers, query])
    const c = await reader('r1', headers, query)
    const { error, got } = await refusal(c, serve(c, runRoute('events', 'r1', query)))
    t.type(error, MalformedRequestError, name)
    t.equal(got?.status, 400, name)
    t.equal(got?.body, JSON.stringify({ message }), name)
  }
})

t.test('an event the run has not produced: 400', async t => {
  const { store, serve } = setup(t)
  await finishedRun(store, 'three', Date.now(), ['a', 'b', 'c'])
  await runningRun(store, 'none')
  for (const [runId, headers, message] of [
    ['three', { 'last-event-id': '3' }, 'event 3 does not exist: the last event is 2'],
    ['three', { 'last-event-id': '999999999999999' }, 'event 999999999999999 does not exist: the last event is 2'],
    ['none', { 'last-event-id': '0' }, 'event 0 does not exist: the run has no events yet']
  ] as const) {
    const c = await reader(runId, headers)
    const { error, got } = await refusal(c, serve(c, runRoute('events', runId)))
    t.type(error, EventBeyondLastError, message)
    t.equal(got?.status, 400, message)
    t.equal(got?.body, JSON.stringify({ message }), message)
  }
})

t.test('events of a run not held: 404, and the reader\'s place is freed', async t => {
  const { store, serve } = setup(t, {}, { maxReaders: 1 })
  const base = Date.now()
  await finishedRun(store, 'r1', base)
  const missing = await reader('nobody')
  t.type((await refusal(missing, serve(missing, runRoute('events', 'nobody')))).error, RunNotFoundError)
  const next = await reader('r1')
  await serve(next, runRoute('events', 'r1'))
  t.equal((await next.got)?.status, 200)
})

t.test('events no longer kept: an error event says which, then the kept ones', async t => {
  const { store, serve } = setup(t, { maxEvents: 2 })
  const base = Date.now()
  await finishedRun(store, 'r1', base, ['e0', 'e1', 'e2', 'e3', 'e4'])
  const done = doneFrame('r1', succeededJson('r1', base))
  const fromStart = await reader('r1')
  await serve(fromStart, runRoute('events', 'r1'))
  t.equal((await fromStart.got)?.body, errorFrame('events before 3 are no longer kept') + eventFrame(3, 'e3') + eventFrame(4, 'e4') + done)
  const resumed = await reader('r1', { 'last-event-id': '1' })
  await serve(resumed, runRoute('events', 'r1'))
  t.equal((await resumed.got)?.body, errorFrame('events before 3 are no longer kept') + eventFrame(3, 'e3') + eventFrame(4, 'e4') + done)
  const kept = await reader('r1', { 'last-event-id': '2' })
  await serve(kept, runRoute('events', 'r1'))
  t.equal((await kept.got)?.body, eventFrame(3, 'e3') + eventFrame(4, 'e4') + done, 'none missed: no error event')
})

t.test('an event larger than the caller\'s buffer: the stream waits for it to drain, and goes on', async t => {
  const { store, serve } = setup(t)
  const base = Date.now()
  const big = 'x'.repeat(1024 * 1024)
  await finishedRun(store, 'big', base, [big, 'after'])
  const c = await reader('big')
  await serve(c, runRoute('events', 'big'))
  const got = await c.got
  t.equal(got?.body.length, eventFrame(0, big).length + eventFrame(1, 'after').length + doneFrame('big', succeededJson('big', base)).length)
  t.ok(got?.body === eventFrame(0, big) + eventFrame(1, 'after') + doneFrame('big', succeededJson('big', base)), 'every byte, in order')
})

t.test('a reader that leaves mid-stream: its stream ends, its place is freed', async t => {
  const { store, serve, metrics } = setup(t, {}, { maxReaders: 1 })
  const base = Date.now()
  const run = await runningRun(store, 'r1', base)
  store.records.appendEvent(run, 0, 'e0')
  const first = await reader('r1')
  const serving = serve(first, runRoute('events', 'r1'))
  await metrics.until(m => m.sent === 1)
  first.leave()
  t.equal(await serving, true)
  t.equal(await first.got, undefined, 'its connection was cut')
  await metrics.until(m => m.open === 0)
  store.records.appendEvent(run, 1, 'e1')

  const second = await reader('r1', { 'last-event-id': '0' })
  const next = serve(second, runRoute('events', 'r1'))
  await metrics.until(m => m.sent === 2)
  await store.records.finish(run, succeeded(run))
  await next
  t.equal((await second.got)?.body, eventFrame(1, 'e1') + doneFrame('r1', succeededJson('r1', base)))
})

t.test('a reader that leaves while its buffer is full: its stream ends, its place is freed', async t => {
  const { store, serve, metrics } = setup(t, {}, { maxReaders: 1 })
  const run = await runningRun(store, 'r1')
  store.records.appendEvent(run, 0, 'x'.repeat(1024 * 1024))
  const c = await reader('r1')
  const serving = serve(c, runRoute('events', 'r1'))
  // counted as it is written: the stage now waits for the caller's buffer to drain
  await metrics.until(m => m.sent === 1)
  // as an HttpCall does: its connection closes, then the call aborts
  const closed = new Promise(resolve => c.res.once('close', resolve))
  c.req.socket.destroy()
  await closed
  c.abort(new Error('caller gone'))
  t.equal(await serving, true)
  t.equal(await c.got, undefined)
  const next = await reader('r1', { 'last-event-id': '0' })
  const nextServing = serve(next, runRoute('events', 'r1'))
  await metrics.until(m => m.open === 1 && m.sent === 1)
  await store.records.finish(run, succeeded(run))
  t.equal(await nextServing, true)
  t.equal((await next.got)?.status, 200)
})

t.test('a reader that left before the store answered gets no stream; its place is freed', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  await finishedRun(store, 'r1', base)
  const gate = held<void>()
  const slow = storeWith(store, { records: { follow: async (scope, runId, after, signal) => { await gate.promise; return await store.records.follow(scope, runId, after, signal) } } })
  const { serve, metrics } = routes(slow, { maxReaders: 1 })
  const c = await reader('r1')
  const serving = serve(c, runRoute('events', 'r1'))
  const closed = new Promise(resolve => c.res.once('close', resolve))
  c.leave()
  await closed
  gate.resolve()
  t.equal(await serving, true)
  t.equal(c.res.headersSent, false)
  t.equal(metrics.open + metrics.sent, 0, 'no stream begun')
  const next = await reader('r1')
  await serve(next, runRoute('events', 'r1'))
  t.equal((await next.got)?.body, doneFrame('r1', succeededJson('r1', base)))
})

t.test('the deadline passing mid-stream ends it with an error event, not a cut', async t => {
  const { store, serve, metrics } = setup(t)
  const run = await runningRun(store, 'r1')
  store.records.appendEvent(run, 0, 'e0')
  const c = await reader('r1')
  const serving = serve(c, runRoute('events', 'r1'))
  await metrics.until(m => m.sent === 1)
  c.abort(new DeadlineExceededError(5))
  t.equal(await serving, true)
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, eventFrame(0, 'e0') + errorFrame('request exceeded its deadline of 5s'))
  t.equal((await store.records.get(SCOPE, 'r1')).record.status, 'running', 'the run goes on')
})

/** Follows that yield `items`, then fail with `error`. */
function failingFollow (items: readonly RunEventItem[], error: Error): RunStore['records']['follow'] {
  return async () => (async function * (): AsyncGenerator<RunEventItem> {
    yield * items
    throw error
  })()
}

t.test('the store failing mid-stream: an error event ends the stream (the reader resumes with Last-Event-ID)', async t => {
  const { serve, metrics } = routes(storeWith(memoryStore(t), {
    records: { follow: failingFollow([{ type: 'event', n: 4, data: 'e4' }, { type: 'event', n: 5, data: 'e5' }], new RunStoreUnavailableError('gone')) }
  }))
  const c = await reader('r1', { 'last-event-id': '3' })
  t.equal(await serve(c, runRoute('events', 'r1')), true)
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, eventFrame(4, 'e4') + eventFrame(5, 'e5') + errorFrame('run store unavailable'))
  await metrics.until(m => m.open === 0)
  t.equal(metrics.open, 0, 'the stream is counted closed')
})

t.test('an unexpected failure mid-stream is thrown on: answering it cuts the connection', async t => {
  const { serve, metrics } = routes(storeWith(memoryStore(t), {
    records: { follow: failingFollow([{ type: 'event', n: 0, data: 'e0' }], new TypeError('a bug')) }
  }), { maxReaders: 1 })
  const c = await reader('r1')
  const { error, got } = await refusal(c, serve(c, runRoute('events', 'r1')))
  t.type(error, TypeError)
  t.equal(got, undefined, 'a begun stream has no status left to send')
  await metrics.until(m => m.open === 0)
  const next = await reader('r1')
  t.type((await refusal(next, serve(next, runRoute('events', 'r1')))).error, TypeError, 'its place was freed: the next reader is served')
})

/** A follow that yields event 0, then, once `gate` opens, `after` (an item, or an error thrown): a store that does not heed the reader's signal. */
function gatedFollow (gate: Promise<void>, after: RunEventItem | Error): RunStore['records']['follow'] {
  return async () => (async function * (): AsyncGenerator<RunEventItem> {
    yield { type: 'event', n: 0, data: 'e0' }
    await gate
    if (after instanceof Error) throw after
    yield after
  })()
}

t.test('nothing is written after the deadline\'s error event, whatever the store yields or throws after it', async t => {
  for (const after of [{ type: 'event', n: 1, data: 'e1' } as const, new RunStoreUnavailableError('gone late')]) {
    const gate = held<void>()
    const { serve, metrics } = routes(storeWith(memoryStore(t), { records: { follow: gatedFollow(gate.promise, after) } }))
    const c = await reader('r1')
    const serving = serve(c, runRoute('events', 'r1'))
    await metrics.until(m => m.sent === 1)
    c.abort(new DeadlineExceededError(5))
    const got = await c.got
    t.equal(got?.body, eventFrame(0, 'e0') + errorFrame('request exceeded its deadline of 5s'))
    gate.resolve()
    if (after instanceof Error) {
      // the stream has ended: the failure goes to the pipeline, which can only cut a connection already closed
      await t.rejects(serving, RunStoreUnavailableError)
    } else {
      t.equal(await serving, true)
    }
    t.equal(metrics.sent, 1, 'the late event was not sent')
  }
})

t.test('RUN_MAX_READERS: the reader past the bound gets 503 with Retry-After; other routes are not counted; a reader ending makes room', async t => {
  const { store, serve, metrics } = setup(t, {}, { maxReaders: 2 })
  const base = Date.now()
  const run = await runningRun(store, 'r1', base)
  const first = await reader('r1')
  const firstServing = serve(first, runRoute('events', 'r1'))
  const second = await reader('r1')
  const secondServing = serve(second, runRoute('events', 'r1'))
  await metrics.until(m => m.open === 2)

  const third = await reader('r1', { 'x-request-id': 'third' })
  const { error, got } = await refusal(third, serve(third, runRoute('events', 'r1')))
  t.type(error, TooManyReadersError)
  t.equal(got?.status, 503)
  t.equal(got?.headers['retry-after'], '1')
  t.equal(got?.headers['x-request-id'], 'third')
  t.equal(got?.body, '{"message":"too many readers of run events"}')

  const record = await call({ method: 'GET', path: '/v4/p1/a1/_runs/r1' })
  await serve(record, runRoute('record', 'r1'))
  t.equal((await record.got)?.status, 200, 'a record is no reader')
  const list = await call({ method: 'GET', path: '/v4/p1/a1/_runs' })
  await serve(list, runRoute('list'))
  t.equal((await list.got)?.status, 200, 'nor is a list')

  first.leave()
  await firstServing
  await metrics.until(m => m.open === 1)
  const fourth = await reader('r1')
  const fourthServing = serve(fourth, runRoute('events', 'r1'))
  await metrics.until(m => m.open === 2)
  await store.records.finish(run, succeeded(run))
  await Promise.all([secondServing, fourthServing])
  const done = doneFrame('r1', succeededJson('r1', base))
  t.equal((await second.got)?.body, done)
  t.equal((await fourth.got)?.body, done, 'the place the first left was taken')
})

t.test('each route\'s instance counts its own readers', async t => {
  const store = memoryStore(t)
  const run = await runningRun(store, 'r1')
  const one = routes(store, { maxReaders: 1 })
  const other = routes(store, { maxReaders: 1 })
  const a = await reader('r1')
  const aServing = one.serve(a, runRoute('events', 'r1'))
  await one.metrics.until(m => m.open === 1)
  const b = await reader('r1')
  const bServing = other.serve(b, runRoute('events', 'r1'))
  await other.metrics.until(m => m.open === 1)
  await store.records.finish(run, succeeded(run))
  t.same(await Promise.all([aServing, bServing]), [true, true])
})

t.test('heartbeats: `: keep-alive` comments while the run is quiet, none after done', async t => {
  const { store, serve, metrics } = setup(t, {}, { heartbeatMs: 1 })
  const base = Date.now()
  const run = await runningRun(store, 'quiet', base)
  const c = await reader('quiet')
  const serving = serve(c, runRoute('events', 'quiet'))
  await metrics.until(m => m.open === 1)
  // the 1 ms heartbeat timer was armed before this 20 ms one: it fires first, and again every ms
  await new Promise(resolve => setTimeout(resolve, 20))
  await store.records.finish(run, succeeded(run))
  await serving
  const body = (await c.got)?.body ?? ''
  t.ok(body.startsWith(': keep-alive\n\n'), 'a heartbeat came first')
  t.equal(body.replaceAll(': keep-alive\n\n', ''), doneFrame('quiet', succeededJson('quiet', base)), 'only heartbeats beside the events')
  t.ok(body.endsWith(doneFrame('quiet', succeededJson('quiet', base))), 'none after done')
})

t.test('POST …/cancel and the list are served by the same stage', async t => {
  const { store, serve, cancels, runsTotal } = setup(t)
  const base = Date.now()
  await queuedRun(store, 'q1', base)
  await queuedRun(store, 'q2', base + 1)
  const cancel = await call({ method: 'POST', path: '/v4/p1/a1/_runs/q1/cancel' })
  t.equal(await serve(cancel, runRoute('cancel', 'q1')), true)
  const canceled = (await store.records.get(SCOPE, 'q1')).record
  t.equal((await cancel.got)?.body, `{"run_id":"q1","status":"canceled","created_at":"${iso(base)}","completed_at":"${canceled.completed_at as string}","error":{"message":"run canceled"}}`)

  const list = await call({ method: 'GET', path: '/v4/p1/a1/_runs?status=queued' })
  t.equal(await serve(list, runRoute('list', '', 'status=queued')), true)
  t.equal((await list.got)?.body, `{"runs":[${queuedJson('q2', base + 1)}],"next_cursor":null}`)

  const purge = await call({ method: 'DELETE', path: '/v4/p1/a1/_runs?status=queued' })
  t.equal(await serve(purge, runRoute('list', '', 'status=queued')), true)
  t.equal((await purge.got)?.body, '{"canceled":1}')
  t.same([...cancels.counts], [['request', 1]])
  t.same([...runsTotal.counts], [['canceled', 2]])
})

t.test('a plain call in flight is canceled through the stage\'s own calls', async t => {
  const { serve, calls } = setup(t)
  const target = await call({ method: 'POST', path: '/v4/p1/a1/work', headers: { 'x-request-id': 'plain-1' } })
  calls.add(target)
  const cancel = await call({ method: 'POST', path: '/v4/p1/a1/_runs/plain-1/cancel' })
  await serve(cancel, runRoute('cancel', 'plain-1'))
  t.equal((await cancel.got)?.body, '{"run_id":"plain-1","status":"canceled"}')
  t.equal((await target.got)?.status, 499)
})
