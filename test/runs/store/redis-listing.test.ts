import t, { type Test } from 'tap'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { Redis } from 'ioredis'
import type { NewRun } from '../../../src/runs/run-data.ts'
import type { RunPage } from '../../../src/runs/store/run-listing.ts'
import { recordedRun } from '../../../src/runs/run-record.ts'
import { type PrivateRunStore, privateRunStore } from '../../helpers/redis-server.ts'

// The Redis listing past its bounds: a page's cost whatever the runs kept, pages across statuses,
// one caller's page read in steps (RUN_ACCESS=caller), a purge over more entries than one script
// goes through, a run taken and not started purged.

const SCOPE = { projectId: 'p', appName: 'a' }
const SETTINGS: RedisStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 2000, queueMaxBytes: 64 * 1024 * 1024, scope: SCOPE }
const runOf = (runId: string, createdAt: number, sub?: string): NewRun => ({ scope: SCOPE, runId, request: { method: 'POST', path: '/x', headers: [], body: Buffer.from('b') }, webhook: undefined, createdAt, sub })

/** A store of app p/a on a private Redis (reachable, closed at `t`'s teardown), and that Redis. */
async function storeFor (t: Test): Promise<{ redis: PrivateRunStore, store: RedisRunStore }> {
  const redis = await privateRunStore(t)
  const store = new RedisRunStore(redis.url, SETTINGS)
  t.teardown(() => store.close())
  await store.reachable(5000)
  return { redis, store }
}

/** Runs `from` to `from + count` recorded and ended as the store does (a recorded sync run each: opened, then finished `status`), made by `sub`. */
async function keepRuns (store: RedisRunStore, from: number, count: number, base: number, status: 'succeeded' | 'failed' = 'succeeded', sub?: string): Promise<void> {
  for (let start = from; start < from + count; start += 500) {
    await Promise.all(Array.from({ length: Math.min(500, from + count - start) }, async (_, k) => {
      const i = start + k
      const run = recordedRun(runOf(`done-${String(i).padStart(5, '0')}`, base + 1_000 + i, sub))
      await store.records.open(run)
      await store.records.finish(run, { status, statusCode: status === 'succeeded' ? 200 : 500, resultJson: '{}', runTimeMs: 1, error: status === 'failed' ? 'x' : undefined, completedAt: Date.now() })
    }))
  }
}

/** The commands a listing ran in Redis (INFO commandstats: those its script ran; nothing else of the kind runs meanwhile). */
async function listingCost (probe: Redis, list: () => Promise<unknown>): Promise<number> {
  const reads = async (): Promise<number> => {
    const stats = await probe.info('commandstats')
    let calls = 0
    for (const [, name, count] of stats.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) if (name === 'hmget' || name === 'zrevrangebyscore') calls += Number(count)
    return calls
  }
  const before = await reads()
  await list()
  return await reads() - before
}

t.test('a page costs the same whatever the runs kept and however few match: 1,000 and then 10,000 kept', async t => {
  const { redis, store } = await storeFor(t)
  const base = Date.now() - 100_000
  for (const [i, id] of ['q-0', 'q-1'].entries()) await store.queue.submit(runOf(id, base + i))
  await keepRuns(store, 0, 10, base, 'failed')
  await keepRuns(store, 10, 990, base)
  const costs = async (): Promise<number[]> => [
    await listingCost(redis.probe, async () => await store.listing.list(SCOPE, { statuses: ['canceled'], after: undefined, limit: 1 })),
    await listingCost(redis.probe, async () => await store.listing.list(SCOPE, { statuses: ['queued'], after: undefined, limit: 2 })),
    await listingCost(redis.probe, async () => await store.listing.list(SCOPE, { statuses: ['failed'], after: undefined, limit: 100 })),
    await listingCost(redis.probe, async () => await store.listing.list(SCOPE, { statuses: undefined, after: undefined, limit: 10 }))
  ]
  const atThousand = await costs()
  await keepRuns(store, 1_000, 9_000, base)
  t.same(await costs(), atThousand, `the same commands with 10,000 runs kept as with 1,000 (${atThousand.join(', ')})`)
  t.ok(atThousand.every(cost => cost <= 60), 'each a few dozen at most')
  const queued = await store.listing.list(SCOPE, { statuses: ['queued'], after: undefined, limit: 2 })
  t.same([queued.records.map(r => r.run_id), queued.next], [['q-1', 'q-0'], undefined], 'the queued runs, nothing after')
  const failed = await store.listing.list(SCOPE, { statuses: ['failed'], after: undefined, limit: 100 })
  t.same(failed.records.map(r => r.run_id), Array.from({ length: 10 }, (_, i) => `done-${String(9 - i).padStart(5, '0')}`))
})

t.test('pages follow one another exactly, across statuses and equal created_at; runs gone leave their index as they are met', async t => {
  const { redis, store } = await storeFor(t)
  const base = Date.now() - 100_000
  await keepRuns(store, 0, 30, base)
  await keepRuns(store, 30, 30, base, 'failed')
  // five more at one created_at, across two statuses
  for (const id of ['same-a', 'same-b', 'same-c']) await store.queue.submit(runOf(id, base + 5_000))
  await keepRuns(store, 4_000, 1, base) // done-04000 at base + 5000
  const gone = ['done-00003', 'done-00033']
  await redis.probe.del(...gone.map(id => `as:{p/a}:run:${id}`))
  const all: string[] = []
  let after: { createdAt: number, runId: string } | undefined
  for (let pages = 0; pages < 20; pages++) {
    const page = await store.listing.list(SCOPE, { statuses: undefined, after, limit: 7 })
    all.push(...page.records.map(r => r.run_id))
    if (page.next === undefined) break
    after = page.next
  }
  const expected = [
    'same-c', 'same-b', 'same-a', 'done-04000',
    ...Array.from({ length: 60 }, (_, i) => `done-${String(59 - i).padStart(5, '0')}`).filter(id => !gone.includes(id))
  ]
  t.same(all, expected, 'newest first, each once, none gone')
  t.equal(await redis.probe.zscore('as:{p/a}:runs:succeeded', 'done-00003'), null, 'a gone run left its index')
  t.equal(await redis.probe.zscore('as:{p/a}:runs:failed', 'done-00033'), null)
})

t.test('a caller\'s page among 2,500 runs of another\'s: read in steps, each of at most 1,000 runs; the page full, its cursor right', async t => {
  const { redis, store } = await storeFor(t)
  const base = Date.now() - 100_000
  await keepRuns(store, 0, 2, base, 'succeeded', 'alice')
  await keepRuns(store, 2, 2500, base, 'succeeded', 'bob')
  await keepRuns(store, 2502, 1, base, 'failed', 'alice')
  const steps = async (list: () => Promise<unknown>): Promise<number> => {
    const calls = async (): Promise<number> => Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(await redis.probe.info('commandstats'))?.[1] ?? 0)
    const before = await calls()
    await list()
    return await calls() - before
  }
  const ids = (page: RunPage): string[] => page.records.map(record => record.run_id)
  let first: RunPage | undefined
  t.equal(await steps(async () => { first = await store.listing.list(SCOPE, { statuses: undefined, after: undefined, limit: 2, sub: 'alice' }) }), 3,
    'alice\'s newest, 1,000 of bob\'s, 1,000 more, then the rest and alice\'s two others')
  t.same(ids(first as RunPage), ['done-02502', 'done-00001'], 'the page full of alice\'s runs')
  t.same(first?.next, { createdAt: base + 1_001, runId: 'done-00001' })
  const second = await store.listing.list(SCOPE, { statuses: undefined, after: first?.next, limit: 2, sub: 'alice' })
  t.same([ids(second), second.next], [['done-00000'], undefined], 'the next page: the one left, and nothing follows')
  const failed = await store.listing.list(SCOPE, { statuses: ['failed'], after: undefined, limit: 5, sub: 'alice' })
  t.same([ids(failed), failed.next], [['done-02502'], undefined], 'a filter that matches bob\'s runs alone reads none of them')
  const bobs = await store.listing.list(SCOPE, { statuses: ['succeeded'], after: undefined, limit: 1000, sub: 'bob' })
  t.equal(bobs.records.length, 1000)
  t.equal(bobs.next?.runId, 'done-01502')
  t.same(ids(await store.listing.list(SCOPE, { statuses: undefined, after: undefined, limit: 5, sub: 'carol' })), [])
})

t.test('a purge over more entries than one step: every queued run canceled, the running ones (taken: started) left', async t => {
  const { redis, store } = await storeFor(t)
  const now = Date.now()
  await store.queue.submit(runOf('running', now))
  const running = await store.queue.take(AbortSignal.timeout(5000))
  t.ok(await store.queue.start(running, Date.now()))
  await store.queue.submit(runOf('taken', now + 1))
  const taken = await store.queue.take(AbortSignal.timeout(5000))
  t.equal(taken.runId, 'taken')
  await Promise.all(Array.from({ length: 1200 }, async (_, i) => await store.queue.submit(runOf(`q-${i}`, now + 2 + i))))
  t.equal(await store.queue.queuedCount(), 1200)
  t.equal(await store.listing.cancelQueued(SCOPE), 1200)
  t.equal((await store.records.get(SCOPE, 'taken')).record.status, 'running', 'a taken run has started: not queued, not canceled')
  t.equal(await store.queue.queuedCount(), 0)
  t.equal(await redis.probe.get('as:{p/a}:queued-bytes'), '0')
  t.equal(await redis.probe.xlen('as:{p/a}:queue'), 2, 'the running runs\' entries alone')
  const canceled = await store.listing.list(SCOPE, { statuses: ['canceled'], after: undefined, limit: 1000 })
  t.equal(canceled.records.length, 1000)
  t.same(Object.keys(canceled.records[0] ?? {}), ['run_id', 'status', 'created_at', 'completed_at', 'error'])
  t.ok((await redis.probe.ttl('as:{p/a}:run:q-0')) > 0, 'a canceled run expires with the retention')
  t.equal((await store.records.get(SCOPE, 'running')).record.status, 'running')
  t.equal(await store.listing.cancelQueued(SCOPE), 0)
})
