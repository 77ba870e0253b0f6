import t from 'tap'
import type { NewRun, RunEventItem, RunOutcome, RunView } from '../../../src/runs/run-data.ts'
import { MemoryRunStore } from '../../../src/runs/store/memory/memory-run-store.ts'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { RunRecords } from '../../../src/runs/store/run-records.ts'
import type { RunStoreListener } from '../../../src/runs/store/run-store.ts'
import type { InterruptionReason } from '../../../src/shared/metric-contracts.ts'
import { flushRedis, testRedis } from '../../helpers/redis-server.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// A run's attempts in each store (docs/runs.md, "Running on interruptible capacity"): counted as
// it starts when RUN_MAX_ATTEMPTS is above 1; with Redis, an interrupted attempt (its sidecar
// stopping, its app unreachable, its sidecar lost) queues the run again, in its place, with a retry
// event between the attempts' events, and the interrupted attempt's late answer is refused.

const SCOPE = { projectId: 'proj', appName: 'app' }
const SETTINGS: RedisStoreSettings = {
  retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1 << 20, queueDepth: 100, queueMaxBytes: 1 << 20, maxAttempts: 3, scope: SCOPE
}
let counter = 0
const newRun = (): NewRun => ({
  scope: SCOPE, runId: `a${++counter}`, request: { method: 'POST', path: '/work', headers: [], body: Buffer.from('{}') }, webhook: { url: new URL('https://h.example/'), secret: 'k' }, createdAt: Date.now()
})
const listener = (overrides: Partial<RunStoreListener>): RunStoreListener => ({ canceled: () => {}, lost: () => {}, expired: () => {}, availability: () => {}, ...overrides })
const outcome = (fields: Partial<RunOutcome> = {}): RunOutcome => ({
  status: 'succeeded', statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 5, error: undefined, completedAt: Date.now(), ...fields
})
const stopped = (): RunOutcome => outcome({ status: 'failed', statusCode: 503, resultJson: '{"message":"replica stopped"}', error: 'replica stopped', interrupted: 'replica stopped' })
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
/** An interruption as a record lists it, its time any ISO 8601 one (t.match). */
const interruption = (attempt: number, reason: InterruptionReason): { attempt: number, reason: InterruptionReason, at: RegExp } => ({ attempt, reason, at: ISO })
type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

t.test('in memory: attempts counted above 1, never queued again; an interrupted last attempt is listed', async t => {
  const store = new MemoryRunStore({ ...SETTINGS, scope: undefined })
  t.teardown(() => store.close())
  t.equal((store.records as RunRecords).retry, undefined, 'no retry in memory')
  const run = newRun()
  await store.queue.submit(run)
  const taken = await store.queue.take(AbortSignal.timeout(1000))
  t.equal(taken.attempt, 1)
  t.equal((await store.records.get(SCOPE, run.runId)).record.attempt, 1)
  const ended = await store.records.finish(taken, stopped())
  t.match(ended.record, { status: 'failed', status_code: 503, attempt: 1, interruptions: [interruption(1, 'replica stopped')] })

  const plain = new MemoryRunStore({ ...SETTINGS, maxAttempts: 1, scope: undefined })
  t.teardown(() => plain.close())
  await plain.queue.submit(newRun())
  const uncounted = await plain.queue.take(AbortSignal.timeout(1000))
  t.equal(uncounted.attempt, undefined, 'RUN_MAX_ATTEMPTS 1: not counted')
  t.same(Object.keys((await plain.records.finish(uncounted, stopped())).record).filter(key => key === 'attempt' || key === 'interruptions'), [])
})

t.test('with Redis', async t => {
  const redisUrl = await testRedis(t)
  if (redisUrl === undefined) return
  const stores = async (t: Tap, names: string[], timing = {}): Promise<RedisRunStore[]> => {
    await flushRedis(redisUrl)
    const opened = names.map(consumer => new RedisRunStore(redisUrl, SETTINGS, { consumer, ...timing }))
    t.teardown(async () => { for (const store of opened) await store.close() })
    await Promise.all(opened.map(async store => await store.reachable(5000)))
    return opened
  }
  const next = async (items: AsyncIterator<RunEventItem>): Promise<RunEventItem | undefined> => (await items.next()).value as RunEventItem | undefined

  t.test('an interrupted attempt: queued again with its retry event; the next continues the events; the late end of the first is refused', async t => {
    const [a, b] = await stores(t, ['a', 'b']) as [RedisRunStore, RedisRunStore]
    const retried: Array<[string, InterruptionReason, number]> = []
    a.listen(listener({ retried: (_scope, runId, reason, attempt) => { retried.push([runId, reason, attempt]) } }))
    const run = newRun()
    await a.queue.submit(run)
    const first = await a.queue.take(AbortSignal.timeout(5000))
    t.same([first.attempt, first.firstEvent], [1, 0])
    const events = (await b.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(10_000)))[Symbol.asyncIterator]()
    a.records.appendEvent(first, 0, 'step 0 of attempt 1')
    t.same(await next(events), { type: 'event', n: 0, data: 'step 0 of attempt 1' })
    t.equal(await a.records.retry(first, stopped()), true)
    t.same(retried, [[run.runId, 'replica stopped', 1]])
    t.same(await next(events), { type: 'event', n: 1, data: '{"attempt":2,"reason":"replica stopped"}', event: 'retry' }, 'the retry event, live')
    const between = (await b.records.get(SCOPE, run.runId)).record
    t.match(between, { status: 'queued', attempt: 1, interruptions: [interruption(1, 'replica stopped')] })
    t.same([between.started_at, between.queue_time_ms], [undefined, undefined])

    const second = await b.queue.take(AbortSignal.timeout(5000))
    t.same([second.runId, second.attempt, second.firstEvent], [run.runId, 2, 2])
    t.same([second.request.path, second.request.body?.toString(), second.webhook?.secret], ['/work', '{}', 'k'], 'the same request and webhook')
    b.records.appendEvent(second, 2, 'step 0 of attempt 2')
    t.same(await next(events), { type: 'event', n: 2, data: 'step 0 of attempt 2' })

    const late = await a.records.finish(first, outcome({ resultJson: '"late"' }))
    t.equal(late.endedElsewhere, true, 'the first attempt\'s late answer is not the run\'s')
    t.equal(await a.records.retry(first, stopped()), false, 'nor is its late interruption')
    t.equal((await b.records.get(SCOPE, run.runId)).record.status, 'running')
    const done = await b.records.finish(second, outcome())
    t.match(done.record, { status: 'succeeded', attempt: 2, interruptions: [interruption(1, 'replica stopped')] })
    t.equal(done.endedElsewhere, undefined)
    t.match(await next(events), { type: 'done', view: { record: { status: 'succeeded', attempt: 2 } } })
    const replay = (await b.records.follow(SCOPE, run.runId, 0, AbortSignal.timeout(5000)))[Symbol.asyncIterator]()
    t.same(await next(replay), { type: 'event', n: 1, data: '{"attempt":2,"reason":"replica stopped"}', event: 'retry' }, 'resumed after event 0: the retry event, as kept')
    t.same(retried.length, 1)
  })

  t.test('a run canceled during its attempt is not queued again: the cancel stands', async t => {
    const [a] = await stores(t, ['a']) as [RedisRunStore]
    const run = newRun()
    await a.queue.submit(run)
    const taken = await a.queue.take(AbortSignal.timeout(5000))
    await a.records.cancel(SCOPE, run.runId)
    t.equal(await a.records.retry(taken, stopped()), false)
    t.equal((await a.records.get(SCOPE, run.runId)).record.status, 'canceled')
  })

  t.test('a lost sidecar\'s attempt with attempts left is queued again, not failed; its last attempt lost fails with every interruption', async t => {
    const timing = { heartbeatMs: 200, lostAfterMs: 1000 }
    const [dead] = await stores(t, ['dead'], timing) as [RedisRunStore]
    // the store that finds a sidecar lost decides by its own RUN_MAX_ATTEMPTS: 2 here
    const reaper = new RedisRunStore(redisUrl, { ...SETTINGS, maxAttempts: 2 }, { consumer: 'reaper', ...timing })
    t.teardown(async () => { await reaper.close() })
    await reaper.reachable(5000)
    const retried: Array<[InterruptionReason, number]> = []
    const lost: RunView[] = []
    reaper.listen(listener({ retried: (_scope, _runId, reason, attempt) => { retried.push([reason, attempt]) }, lost: (_run, view) => { lost.push(view) } }))
    const run = newRun()
    await dead.queue.submit(run)
    const first = await dead.queue.take(AbortSignal.timeout(5000))
    await dead.close() // no end, no heartbeat: as if killed
    await eventually(() => retried.length === 1, 10_000)
    t.same(retried, [['replica lost', 1]])
    t.match((await reaper.records.get(SCOPE, run.runId)).record, { status: 'queued', attempt: 1, interruptions: [interruption(1, 'replica lost')] })
    t.same(lost, [], 'not failed')
    const dying = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'dying', ...timing })
    t.teardown(async () => { await dying.close() })
    await dying.reachable(5000)
    const second = await dying.queue.take(AbortSignal.timeout(5000))
    t.same([second.runId, second.attempt], [run.runId, 2])
    await dying.close()
    await eventually(() => lost.length === 1, 10_000)
    t.match(lost[0]?.record, {
      status: 'failed', status_code: 502, error: { message: 'replica lost' }, attempt: 2,
      interruptions: [interruption(1, 'replica lost'), interruption(2, 'replica lost')]
    }, 'its last attempt lost: it ends, its record saying which attempt it was')
    t.equal(retried.length, 1)
    t.equal((await reaper.records.finish(first, outcome())).endedElsewhere, true, 'the lost first attempt\'s late answer is refused')
  })
})
