import type { Test } from 'tap'
import {
  AsyncQueueFullError, EventBeyondLastError, RunFinishedError, RunIdTakenError, RunNotAsyncError, RunNotFoundError
} from '../../../src/errors.ts'
import { recordedRun, recordJson } from '../../../src/runs/run-record.ts'
import type { RunStore, RunStoreListener, RunStoreSettings } from '../../../src/runs/store/run-store.ts'
import type { NewRun, RunEventItem, RunScope, TakenRun } from '../../../src/runs/run-data.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

/** Opens a fresh, empty store (the suite closes it). */
export type OpenStore = (settings: RunStoreSettings) => Promise<RunStore>

const SCOPE: RunScope = { projectId: 'proj', appName: 'app' }
const SETTINGS: RunStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 64 * 1024 * 1024, queueDepth: 10, queueMaxBytes: 256 * 1024 * 1024, scope: SCOPE }
let counter = 0

function newRun (overrides: Partial<NewRun> = {}): NewRun {
  return {
    scope: SCOPE,
    runId: `run-${++counter}-${process.pid}`,
    request: { method: 'POST', path: '/work?x=1', headers: ['content-type', 'application/json', 'x-request-id', 'r'], body: Buffer.from('{"a":1}') },
    webhook: undefined,
    createdAt: Date.now(),
    ...overrides
  }
}

function listener (overrides: Partial<RunStoreListener> = {}): RunStoreListener {
  return { canceled: () => {}, lost: () => {}, expired: () => {}, availability: () => {}, ...overrides }
}

async function takeOne (store: RunStore, ms = 5000): Promise<TakenRun> {
  return await store.queue.take(AbortSignal.timeout(ms))
}

/** Collects a follower's items until `done` (or `count` items). */
async function collect (items: AsyncIterable<RunEventItem>, count = Infinity): Promise<RunEventItem[]> {
  const out: RunEventItem[] = []
  for await (const item of items) {
    out.push(item)
    if (item.type === 'done' || out.length >= count) break
  }
  return out
}

const OUTCOME = { status: 'succeeded' as const, statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 12.5, error: undefined }

/** The behaviour every run store backend shares (memory, Redis). */
export function runStoreSuite (t: Test, open: OpenStore): void {
  async function fresh (t: Test, settings: Partial<RunStoreSettings> = {}): Promise<RunStore> {
    const store = await open({ ...SETTINGS, ...settings })
    t.teardown(async () => { await store.close() })
    return store
  }

  t.test('submit, take (which starts it), finish: the record at every step, exact', async t => {
    const store = await fresh(t)
    const createdAt = Date.now() - 1500
    const created = new Date(createdAt).toISOString()
    const run = newRun({ createdAt, webhook: { url: new URL('https://hooks.example/x'), secret: 's3cret' } })
    const queued = await store.queue.submit(run)
    t.equal(recordJson(queued), `{"run_id":"${run.runId}","status":"queued","created_at":"${created}","webhook":{"status":"pending","attempts":0}}`)
    t.equal(recordJson(await store.records.get(SCOPE, run.runId)), recordJson(queued))
    t.equal(await store.queue.queuedCount(), 1)
    const before = Date.now()
    const taken = await takeOne(store)
    t.equal(taken.runId, run.runId)
    t.equal(await store.queue.queuedCount(), 0, 'taken: started in the same step, it waits no more')
    t.equal(await store.queue.runningCount(), 1)
    // the run as it goes to the app: its request and webhook (a shared store read them with the take)
    const started = await store.queue.start(taken, Date.now())
    const after = Date.now()
    t.equal(started?.runId, run.runId, 'started')
    t.same(started?.request, run.request)
    t.ok(Buffer.isBuffer(started?.request.body))
    t.same([started?.webhook?.url.href, started?.webhook?.secret], ['https://hooks.example/x', 's3cret'])
    t.equal(await store.queue.queuedCount(), 0)
    t.equal(await store.queue.runningCount(), 1)
    const running = recordJson(await store.records.get(SCOPE, run.runId))
    const startedAt = /"started_at":"([^"]+)"/.exec(running)?.[1] ?? ''
    const startedMs = Date.parse(startedAt)
    t.ok(startedMs >= before && startedMs <= after, 'started at its take (Redis) or as it goes to the app (memory)')
    t.equal(running, `{"run_id":"${run.runId}","status":"running","created_at":"${created}","started_at":"${startedAt}","queue_time_ms":${startedMs - createdAt},"webhook":{"status":"pending","attempts":0}}`)
    const done = await store.records.finish(taken, { ...OUTCOME, completedAt: startedMs + 500 })
    const expected = `{"run_id":"${run.runId}","status":"succeeded","created_at":"${created}","started_at":"${startedAt}","completed_at":"${new Date(startedMs + 500).toISOString()}","queue_time_ms":${startedMs - createdAt},"run_time_ms":12.5,"status_code":200,"result":{"ok":true},"webhook":{"status":"pending","attempts":0}}`
    t.equal(recordJson(done), expected)
    t.equal(recordJson(await store.records.get(SCOPE, run.runId)), expected)
    await store.records.webhookDone(SCOPE, run.runId, 'delivered', 2)
    t.same((await store.records.get(SCOPE, run.runId)).record.webhook, { status: 'delivered', attempts: 2 })
    t.notMatch(recordJson(await store.records.get(SCOPE, run.runId)), 's3cret')
  })

  t.test('a run with no body keeps none; a failed run has its error', async t => {
    const store = await fresh(t)
    const run = newRun({ request: { method: 'GET', path: '/', headers: [], body: null } })
    await store.queue.submit(run)
    const taken = await takeOne(store)
    t.equal((await store.queue.start(taken, Date.now()))?.request.body, null)
    const view = await store.records.finish(taken, { status: 'failed', statusCode: 502, resultJson: '{"message":"app unreachable: connection refused"}', runTimeMs: 1, error: 'app unreachable: connection refused', completedAt: Date.now() })
    t.equal(view.record.status, 'failed')
    t.same(view.record.error, { message: 'app unreachable: connection refused' })
    t.equal(view.resultJson, '{"message":"app unreachable: connection refused"}')
  })

  t.test('ids: a taken id is refused; another scope never sees a run', async t => {
    const store = await fresh(t)
    const run = newRun()
    await store.queue.submit(run)
    await t.rejects(store.queue.submit(run), RunIdTakenError)
    await t.rejects(store.records.get({ projectId: 'proj', appName: 'other' }, run.runId), RunNotFoundError)
    await t.rejects(store.records.get({ projectId: 'other', appName: 'app' }, run.runId), RunNotFoundError)
    await t.rejects(store.records.cancel({ projectId: 'other', appName: 'app' }, run.runId), RunNotFoundError)
    await t.rejects(store.records.follow({ projectId: 'other', appName: 'app' }, run.runId, -1, AbortSignal.timeout(1000)), RunNotFoundError)
    await t.rejects(store.records.get(SCOPE, 'never-recorded'), RunNotFoundError)
  })

  t.test('ASYNC_QUEUE_DEPTH: past it the run is refused and not recorded; a taken (started) run frees its place, one given back takes it again', async t => {
    const store = await fresh(t, { queueDepth: 2 })
    await store.queue.submit(newRun())
    await store.queue.submit(newRun())
    const third = newRun()
    await t.rejects(store.queue.submit(third), AsyncQueueFullError)
    await t.rejects(store.records.get(SCOPE, third.runId), RunNotFoundError)
    t.equal(await store.queue.queuedCount(), 2)
    const taken = await takeOne(store)
    t.equal(await store.queue.queuedCount(), 1, 'taken: started, out of the backlog')
    await store.queue.release(taken)
    t.equal(await store.queue.queuedCount(), 2, 'given back: in the backlog again')
    await t.rejects(store.queue.submit(third), AsyncQueueFullError)
    t.equal((await takeOne(store)).runId, taken.runId, 'given back: taken first again')
    await store.queue.submit(third)
    t.equal(await store.queue.queuedCount(), 2)
  })

  t.test('take: oldest first; concurrent takes get different runs; an aborted take loses nothing', async t => {
    const store = await fresh(t)
    const runs = [newRun(), newRun(), newRun()]
    for (const run of runs) await store.queue.submit(run)
    const [a, b] = await Promise.all([takeOne(store), takeOne(store)])
    t.same([a.runId, b.runId].sort(), [runs[0]?.runId, runs[1]?.runId].sort())
    t.equal((await takeOne(store)).runId, runs[2]?.runId)
    const aborted = new AbortController()
    const waiting = store.queue.take(aborted.signal)
    aborted.abort(new Error('stop'))
    await t.rejects(waiting, { message: 'stop' })
    const late = newRun()
    await store.queue.submit(late)
    t.equal((await takeOne(store)).runId, late.runId)
  })

  t.test('a take waiting for a run gets it as soon as it is submitted', async t => {
    const store = await fresh(t)
    const waiting = takeOne(store, 10_000)
    const run = newRun()
    await store.queue.submit(run)
    t.equal((await waiting).runId, run.runId)
  })

  t.test('release: a taken run goes back for the next take', async t => {
    const store = await fresh(t)
    const run = newRun()
    await store.queue.submit(run)
    const taken = await takeOne(store)
    await store.queue.release(taken)
    t.equal(await store.queue.queuedCount(), 1)
    const again = await takeOne(store)
    t.equal(again.runId, run.runId)
    t.equal((await store.queue.start(again, Date.now()))?.runId, again.runId, 'started')
  })

  t.test('cancel: queued never starts; running tells its owner; finished and unknown refuse', async t => {
    const canceled: string[] = []
    const store = await fresh(t)
    store.listen(listener({ canceled: (scope, runId) => { canceled.push(`${scope.projectId}/${scope.appName}/${runId}`) } }))
    const queued = newRun()
    await store.queue.submit(queued)
    const view = await store.records.cancel(SCOPE, queued.runId)
    t.equal(view.record.status, 'canceled')
    t.same(view.record.error, { message: 'run canceled' })
    t.equal(view.record.started_at, undefined)
    t.equal(view.record.status_code, undefined)
    t.equal(view.resultJson, undefined)
    t.ok(view.record.completed_at)
    t.equal(await store.queue.queuedCount(), 0)
    await t.rejects(store.records.cancel(SCOPE, queued.runId), RunFinishedError)

    const running = newRun()
    await store.queue.submit(running)
    const taken = await takeOne(store)
    t.equal(taken.runId, running.runId, 'the canceled run is never handed out')
    await store.queue.start(taken, Date.now())
    const stopped = await store.records.cancel(SCOPE, running.runId)
    t.equal(stopped.record.status, 'canceled')
    t.equal(stopped.record.status_code, 499)
    t.equal(stopped.resultJson, '{"message":"run canceled"}')
    t.type(stopped.record.run_time_ms, 'number')
    await eventually(() => canceled.length === 1, 2000)
    t.same(canceled, [`proj/app/${running.runId}`])
    const after = await store.records.finish(taken, { ...OUTCOME, completedAt: Date.now() })
    t.equal(after.record.status, 'canceled', 'the cancel came first and stays')
    t.equal(after.record.status_code, 499)
    await t.rejects(store.records.cancel(SCOPE, 'never-recorded'), RunNotFoundError)
  })

  t.test('a run canceled after its take (it started): the cancel stands, the end its runner writes is refused', async t => {
    const store = await fresh(t)
    const run = newRun()
    await store.queue.submit(run)
    const taken = await takeOne(store)
    await store.records.cancel(SCOPE, run.runId)
    const view = await store.records.finish(taken, { ...OUTCOME, completedAt: Date.now() })
    t.equal(view.record.status, 'canceled')
    t.equal((await store.records.get(SCOPE, run.runId)).record.status, 'canceled')
  })

  t.test('a recorded sync run that never reached the app is forgotten with its key; one that did keeps its record', async t => {
    const store = await fresh(t)
    const never = newRun()
    await store.keys.claim(SCOPE, 'never', { runId: never.runId, digest: 'd', async: false }, recordedRun(never))
    await store.keys.drop(SCOPE, 'never', never.runId, true)
    await t.rejects(store.records.get(SCOPE, never.runId), RunNotFoundError, 'never ran: no record')
    t.equal(await store.keys.claim(SCOPE, 'never', { runId: 'retry', digest: 'd', async: false }), undefined, 'the retry runs')
    const cut = newRun()
    await store.keys.claim(SCOPE, 'cut', { runId: cut.runId, digest: 'd', async: false }, recordedRun(cut))
    await store.keys.drop(SCOPE, 'cut', cut.runId, false)
    t.equal((await store.records.get(SCOPE, cut.runId)).record.status, 'running', 'reached the app: its record stays (its end comes)')
    t.equal(await store.keys.claim(SCOPE, 'cut', { runId: 'retry', digest: 'd', async: false }), undefined)
    const submitted = newRun()
    await store.queue.submit(submitted)
    await store.keys.claim(SCOPE, 'async', { runId: submitted.runId, digest: 'd', async: true })
    await store.keys.drop(SCOPE, 'async', submitted.runId, true)
    t.equal((await store.records.get(SCOPE, submitted.runId)).record.status, 'queued', 'an async run is never forgotten by its key')
  })

  t.test('webhookDone: the delivery\'s state on the record; a run gone is 404', async t => {
    const store = await fresh(t)
    const run = newRun({ webhook: { url: new URL('http://127.0.0.1:9/hook'), secret: 's3cret' } })
    const handle = recordedRun(run)
    await store.keys.claim(SCOPE, 'hooked', { runId: run.runId, digest: 'd', async: false }, handle)
    await store.records.finish(handle, { ...OUTCOME, error: 'a/b "quoted"', status: 'failed', completedAt: Date.now() })
    const before = await store.records.get(SCOPE, run.runId)
    t.same(before.record.webhook, { status: 'pending', attempts: 0 })
    await store.records.webhookDone(SCOPE, run.runId, 'delivered', 2)
    const after = await store.records.get(SCOPE, run.runId)
    t.same(after.record, { ...before.record, webhook: { status: 'delivered', attempts: 2 } }, 'only the webhook changed, every other field as it was')
    t.equal(recordJson(after), recordJson(before).replace('"webhook":{"status":"pending","attempts":0}', '"webhook":{"status":"delivered","attempts":2}'))
    await t.rejects(store.records.webhookDone(SCOPE, 'no-such-run', 'failed', 1), RunNotFoundError)
  })

  t.test('retention: a finished run is gone after RUN_RETENTION_SECONDS', async t => {
    const store = await fresh(t, { retentionSeconds: 1 })
    const run = newRun()
    await store.queue.submit(run)
    const taken = await takeOne(store)
    await store.queue.start(taken, Date.now())
    await store.records.finish(taken, { ...OUTCOME, completedAt: Date.now() })
    t.equal((await store.records.get(SCOPE, run.runId)).record.status, 'succeeded')
    await eventually(async () => await store.records.get(SCOPE, run.runId).then(() => false, error => error instanceof RunNotFoundError), 4000)
    t.pass('gone')
  })

  t.test('priorities: each listed run\'s urgency and caller, in order, queued and ended; a run that kept none: 3 and \'\'', async t => {
    const store = await fresh(t)
    const urgent = newRun({ urgency: 1, caller: 'alice' })
    const plain = newRun({ urgency: 3, caller: '10.0.0.7' })
    await store.queue.submit(urgent)
    await store.queue.submit(plain)
    const recorded = recordedRun(newRun())
    await store.keys.claim(SCOPE, `priority-slot-${++counter}`, { runId: recorded.runId, digest: 'd', async: false }, recorded)
    const ids = [plain.runId, 'never-recorded', recorded.runId, urgent.runId]
    const expected = [{ urgency: 3, caller: '10.0.0.7' }, { urgency: 3, caller: '' }, { urgency: 3, caller: '' }, { urgency: 1, caller: 'alice' }]
    t.same(await store.listing.priorities(SCOPE, ids), expected, 'queued')
    const taken = await takeOne(store)
    t.equal(taken.runId, urgent.runId, 'the urgent run is taken first')
    await store.queue.start(taken, Date.now())
    await store.records.finish(taken, { ...OUTCOME, completedAt: Date.now() })
    t.same(await store.listing.priorities(SCOPE, ids), expected, 'the same once it ended')
    t.same(await store.listing.priorities({ projectId: 'proj', appName: 'other' }, [urgent.runId]), [{ urgency: 3, caller: '' }], 'another scope never sees a run')
    t.same(await store.listing.priorities(SCOPE, []), [])
  })

  t.test('a recorded sync run: recorded with its key\'s claim, running at once, never queued, not cancelable; its events and end are kept', async t => {
    const store = await fresh(t)
    const run = newRun({ createdAt: Date.parse('2026-01-02T03:04:05.000Z') })
    const claim = { runId: run.runId, digest: 'd', async: false }
    const handle = recordedRun(run)
    t.equal(await store.keys.claim(SCOPE, 'recorded-slot', claim, handle), undefined, 'claimed and recorded')
    t.equal(handle.entry, '')
    const running = await store.records.get(SCOPE, run.runId)
    t.equal(recordJson(running), `{"run_id":"${run.runId}","status":"running","created_at":"2026-01-02T03:04:05.000Z","started_at":"2026-01-02T03:04:05.000Z","queue_time_ms":0}`)
    t.equal(running.async, false)
    await t.rejects(store.keys.claim(SCOPE, 'another-slot', { ...claim }, handle), RunIdTakenError, 'the id is taken')
    t.equal(await store.keys.claim(SCOPE, 'another-slot', { ...claim, runId: 'other' }), undefined, '…and that key was not claimed')
    await t.rejects(store.records.cancel(SCOPE, run.runId), RunNotAsyncError)
    t.equal(await store.queue.queuedCount(), 0, 'never queued')
    const queued = newRun()
    await store.queue.submit(queued)
    t.equal((await takeOne(store)).runId, queued.runId, 'a take gets the queued run, never the recorded one')
    store.records.appendEvent(handle, 0, 'first')
    store.records.appendEvent(handle, 1, 'second')
    const answer = { status: 200, contentType: 'application/json', body: Buffer.from([0x7b, 0xff, 0x7d]) }
    const finished = await store.records.finish(handle, { ...OUTCOME, completedAt: Date.parse('2026-01-02T03:04:06.000Z'), startedAt: Date.parse('2026-01-02T03:04:05.250Z') }, { slot: 'recorded-slot', answer })
    t.same((await store.keys.claim(SCOPE, 'recorded-slot', { runId: 'repeat', digest: 'd', async: false }))?.answer, answer, 'the answer was kept with the end, byte for byte')
    t.equal(finished.record.status, 'succeeded')
    t.equal(finished.async, false)
    t.equal(finished.record.started_at, '2026-01-02T03:04:05.250Z', 'started when its request went to the app')
    t.equal(finished.record.queue_time_ms, 250)
    t.same((await store.records.get(SCOPE, run.runId)).record, finished.record, 'as kept')
    const items = await collect(await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(5000)))
    t.same(items.slice(0, 2), [{ type: 'event', n: 0, data: 'first' }, { type: 'event', n: 1, data: 'second' }])
    t.equal(items[2]?.type, 'done')
    t.equal((await store.records.get(SCOPE, run.runId)).async, false, 'still not async once finished')
    await t.rejects(store.records.cancel(SCOPE, run.runId), RunNotAsyncError, 'finished or not, only async runs are canceled')
  })

  t.test('idempotency keys: the first claim holds the slot; repeats see it, then its answer, byte for byte', async t => {
    const store = await fresh(t)
    const slot = `slot-${++counter}`
    const claim = { runId: `first-${counter}`, digest: 'digest-a', async: false }
    t.equal(await store.keys.claim(SCOPE, slot, claim), undefined, 'claimed: the first request runs')
    t.same(await store.keys.claim(SCOPE, slot, { runId: 'second', digest: 'digest-b', async: true }), { ...claim, answer: undefined }, 'a repeat sees the running claim, not its own')
    const body = Buffer.from([0x7b, 0x00, 0xff, 0xfe, 0x0a, 0x7d])
    await store.keys.keepAnswer(SCOPE, slot, 'second', { status: 500, contentType: 'text/plain', body: Buffer.from('not mine') })
    t.same((await store.keys.claim(SCOPE, slot, claim))?.answer, undefined, 'only the claim\'s own run keeps an answer')
    await store.keys.keepAnswer(SCOPE, slot, claim.runId, { status: 201, contentType: 'application/octet-stream', body })
    const answered = await store.keys.claim(SCOPE, slot, { runId: 'third', digest: 'digest-a', async: false })
    t.same(answered, { ...claim, answer: { status: 201, contentType: 'application/octet-stream', body } })
    t.ok(answered?.answer?.body.equals(body), 'binary bytes intact')
    await store.keys.drop(SCOPE, slot, claim.runId)
    t.not(await store.keys.claim(SCOPE, slot, { runId: 'fourth', digest: 'digest-a', async: false }), undefined, 'an answered key is never dropped')

    const empty = `slot-${++counter}`
    t.equal(await store.keys.claim(SCOPE, empty, { runId: 'async-run', digest: 'd', async: true }), undefined)
    await store.keys.keepAnswer(SCOPE, empty, 'async-run', { status: 202, contentType: undefined, body: Buffer.alloc(0) })
    t.same(await store.keys.claim(SCOPE, empty, { runId: 'x', digest: 'd', async: true }),
      { runId: 'async-run', digest: 'd', async: true, answer: { status: 202, contentType: undefined, body: Buffer.alloc(0) } }, 'no content type, an empty body')
  })

  t.test('idempotency keys: one claim wins among simultaneous ones; a dropped claim frees the slot; scopes and slots apart', async t => {
    const store = await fresh(t)
    const slot = `slot-${++counter}`
    const claims = await Promise.all(Array.from({ length: 20 }, async (_, i) => await store.keys.claim(SCOPE, slot, { runId: `racer-${i}`, digest: 'd', async: false })))
    const winners = claims.flatMap((held, i) => held === undefined ? [`racer-${i}`] : [])
    t.equal(winners.length, 1, 'exactly one claim won')
    t.ok(claims.every(held => held === undefined || held.runId === winners[0]), 'the others all see the winner')
    await store.keys.drop(SCOPE, slot, 'racer-not-the-winner')
    t.equal((await store.keys.claim(SCOPE, slot, { runId: 'late', digest: 'd', async: false }))?.runId, winners[0], 'only the holder drops its claim')
    await store.keys.drop(SCOPE, slot, winners[0] as string)
    t.equal(await store.keys.claim(SCOPE, slot, { runId: 'retry', digest: 'd', async: false }), undefined, 'dropped: the retry runs')
    t.equal(await store.keys.claim({ projectId: 'proj', appName: 'other' }, slot, { runId: 'other-app', digest: 'd', async: false }), undefined, 'another app has its own slots')
    t.equal(await store.keys.claim(SCOPE, `${slot}-b`, { runId: 'other-slot', digest: 'd', async: false }), undefined)
  })

  t.test('idempotency keys: a running claim is held past RUN_RETENTION_SECONDS; an answered key is kept that long', async t => {
    const store = await fresh(t, { retentionSeconds: 1 })
    const running = `slot-${++counter}`
    const answered = `slot-${++counter}`
    await store.keys.claim(SCOPE, running, { runId: 'r1', digest: 'd', async: false })
    await store.keys.claim(SCOPE, answered, { runId: 'r2', digest: 'd', async: false })
    await store.keys.keepAnswer(SCOPE, answered, 'r2', { status: 200, contentType: 'application/json', body: Buffer.from('{}') })
    t.not(await store.keys.claim(SCOPE, answered, { runId: 'r3', digest: 'd', async: false }), undefined)
    await eventually(async () => await store.keys.claim(SCOPE, answered, { runId: 'r5', digest: 'd', async: false }) === undefined, 4000)
    t.equal((await store.keys.claim(SCOPE, running, { runId: 'r4', digest: 'd', async: false }))?.runId, 'r1', 'the first still runs: still held')
  })

  t.test('durable deliveries: in memory nothing is written down; a shared store holds them until done', async t => {
    const store = await fresh(t)
    const { deliveries } = store
    t.equal(deliveries === undefined, !store.queue.shared, 'only a shared store writes deliveries down')
    if (deliveries === undefined) return
    const held = await deliveries.hold({ scope: SCOPE, runId: 'hooked', target: { url: new URL('https://hooks.example/x'), secret: undefined }, body: '{}' })
    t.match(held, { runId: 'hooked', attempts: 0 })
    await deliveries.attempt(held)
    await deliveries.done(held)
  })

  t.test('follow: kept events, then live ones, then done; after, beyond, gaps', async t => {
    const store = await fresh(t, { maxEvents: 5 })
    const run = newRun()
    await store.queue.submit(run)
    const taken = await takeOne(store)
    await store.queue.start(taken, Date.now())
    await t.rejects(store.records.follow(SCOPE, run.runId, 0, AbortSignal.timeout(1000)), EventBeyondLastError)
    const fromStart = await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(10_000))
    const collected = collect(fromStart)
    store.records.appendEvent(taken, 0, 'zero')
    store.records.appendEvent(taken, 1, 'line one\nline two')
    store.records.appendEvent(taken, 2, '{"n":2}')
    await eventually(async () => (await store.records.follow(SCOPE, run.runId, 1, AbortSignal.timeout(1000)).then(() => true, () => false)), 2000)
    const afterOne = await collect(await store.records.follow(SCOPE, run.runId, 1, AbortSignal.timeout(5000)), 1)
    t.same(afterOne, [{ type: 'event', n: 2, data: '{"n":2}' }])
    await t.rejects(store.records.follow(SCOPE, run.runId, 3, AbortSignal.timeout(1000)), { message: 'event 3 does not exist: the last event is 2' })
    for (let n = 3; n < 9; n++) store.records.appendEvent(taken, n, `e${n}`)
    await eventually(async () => (await store.records.follow(SCOPE, run.runId, 8, AbortSignal.timeout(1000)).then(() => true, () => false)), 2000)
    const final = await store.records.finish(taken, { status: 'succeeded', statusCode: 200, resultJson: '[]', runTimeMs: 5, error: undefined, completedAt: Date.now() })
    const items = await collected
    const seen = items.flatMap(item => item.type === 'event' ? [item.n] : [])
    t.same(seen.slice(-5), [4, 5, 6, 7, 8], 'a live reader ends with the last kept events')
    t.ok(seen.every((n, i) => i === 0 || n > (seen[i - 1] as number)), 'in order, each once')
    const last = items.at(-1)
    t.equal(last?.type, 'done')
    if (last?.type === 'done') t.equal(recordJson(last.view), recordJson(final))
    const late = await collect(await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(5000)))
    t.same(late.slice(0, -1), [{ type: 'gap', first: 4 }, ...[4, 5, 6, 7, 8].map(n => ({ type: 'event', n, data: `e${n}` }))])
    t.equal(late.at(-1)?.type, 'done')
    const fromSix = await collect(await store.records.follow(SCOPE, run.runId, 5, AbortSignal.timeout(5000)))
    t.same(fromSix.map(item => item.type === 'event' ? item.n : item.type), [6, 7, 8, 'done'])
  })

  t.test('follow: a run that is not a stream gets only done; a reader that stops leaves the run alone', async t => {
    const store = await fresh(t)
    const run = newRun()
    await store.queue.submit(run)
    const leaving = new AbortController()
    const left = await store.records.follow(SCOPE, run.runId, -1, leaving.signal)
    const iterator = left[Symbol.asyncIterator]()
    const first = iterator.next()
    leaving.abort()
    t.same(await first, { done: true, value: undefined })
    const taken = await takeOne(store)
    await store.queue.start(taken, Date.now())
    const items = collect(await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(5000)))
    await store.records.finish(taken, { ...OUTCOME, completedAt: Date.now() })
    const got = await items
    t.equal(got.length, 1)
    t.equal(got[0]?.type, 'done')
  })

  t.test('follow: live events reach a reader promptly, several readers, a slow reader catches up in order', async t => {
    const store = await fresh(t, { maxEvents: 10_000 })
    const run = newRun()
    await store.queue.submit(run)
    const taken = await takeOne(store)
    await store.queue.start(taken, Date.now())
    const fast = (await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(20_000)))[Symbol.asyncIterator]()
    const slow = (await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(20_000)))[Symbol.asyncIterator]()
    const lags: number[] = []
    for (let n = 0; n < 20; n++) {
      const next = fast.next()
      const sentAt = performance.now()
      store.records.appendEvent(taken, n, `live ${n}`)
      const item = await next
      lags.push(performance.now() - sentAt)
      t.same(item.value, { type: 'event', n, data: `live ${n}` })
    }
    // a follower is woken by each append (no poll behind it): the reader had each event before the next was appended
    t.equal(lags.length, 20, `every live event reached the reader before the next was appended (slowest ${Math.max(...lags).toFixed(1)} ms)`)
    for (let n = 20; n < 5000; n++) store.records.appendEvent(taken, n, `bulk ${n}`)
    await store.records.finish(taken, { ...OUTCOME, completedAt: Date.now() })
    let expected = 0
    for (let item = await slow.next(); item.done !== true; item = await slow.next()) {
      if (item.value.type === 'done') break
      if ((item.value.type === 'event' ? item.value.n : -1) !== expected) t.fail(`event ${expected} expected, got ${JSON.stringify(item.value)}`)
      expected++
    }
    t.equal(expected, 5000, 'the slow reader got all 5000 events, each once, in order')
  })
}
