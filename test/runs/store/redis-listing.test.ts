import t from 'tap'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { NewRun } from '../../../src/runs/run-data.ts'
import { privateRunStore } from '../../helpers/redis-server.ts'

// The Redis listing past its bounds: a sparse filter over more runs than one script reads, a
// purge over more entries than one script goes through, a run taken and not started purged.

const SCOPE = { projectId: 'p', appName: 'a' }
const SETTINGS: RedisStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 2000, queueMaxBytes: 64 * 1024 * 1024, scope: SCOPE }
const runOf = (runId: string, createdAt: number): NewRun => ({ scope: SCOPE, runId, request: { method: 'POST', path: '/x', headers: [], body: Buffer.from('b') }, webhook: undefined, createdAt })

t.test('a sparse filter over more runs than one read: found across reads, exact to the end; members of gone runs removed', async t => {
  const redis = await privateRunStore(t)
  const store = new RedisRunStore(redis.url, SETTINGS)
  t.teardown(() => store.close())
  await store.reachable(5000)
  // two queued runs at the old end, then 2500 finished ones written as the store writes them, 500 of them gone
  // recent enough for the queue's time limit (ASYNC_QUEUE_TTL_SECONDS) not to fail them
  const base = Date.now() - 100_000
  for (const [i, id] of ['q-0', 'q-1'].entries()) await store.queue.submit(runOf(id, base + i))
  const probe = redis.probe.pipeline()
  for (let i = 0; i < 2500; i++) {
    const id = `done-${String(i).padStart(4, '0')}`
    if (i % 5 !== 0) probe.hset(`as:{p/a}:run:${id}`, 'record', JSON.stringify({ run_id: id, status: 'succeeded', created_at: new Date(base + 1_000 + i).toISOString() }), 'async', '1')
    probe.zadd('as:{p/a}:runs', base + 1_000 + i, id)
  }
  await probe.exec()
  const page = await store.listing.list(SCOPE, { statuses: ['queued'], after: undefined, limit: 2 })
  t.same(page.records.map(r => r.run_id), ['q-1', 'q-0'])
  t.equal(page.next, undefined, 'nothing follows')
  t.equal(await redis.probe.zcard('as:{p/a}:runs'), 2002, 'the 500 gone removed as they were met')
  const one = await store.listing.list(SCOPE, { statuses: ['queued'], after: undefined, limit: 1 })
  t.same([one.records.map(r => r.run_id), one.next], [['q-1'], { createdAt: base + 1, runId: 'q-1' }])
  const newest = await store.listing.list(SCOPE, { statuses: undefined, after: { createdAt: base + 1_000 + 2499, runId: 'done-2499' }, limit: 1000 })
  t.equal(newest.records.length, 1000)
  t.equal(newest.records[0]?.run_id, 'done-2498')
  t.same(newest.next, { createdAt: base + 1_000 + 1249, runId: 'done-1249' }, '1000 of the 2000 kept, from after the newest (done-2498 to done-1249 but the gone fifth)')
})

t.test('a purge over more entries than one step: every queued run canceled (a taken one included), the running one left', async t => {
  const redis = await privateRunStore(t)
  const store = new RedisRunStore(redis.url, SETTINGS)
  t.teardown(() => store.close())
  await store.reachable(5000)
  const now = Date.now()
  await store.queue.submit(runOf('running', now))
  const running = await store.queue.take(AbortSignal.timeout(5000))
  t.ok(await store.queue.start(running, Date.now()))
  await store.queue.submit(runOf('taken', now + 1))
  const taken = await store.queue.take(AbortSignal.timeout(5000))
  t.equal(taken.runId, 'taken')
  await Promise.all(Array.from({ length: 1200 }, async (_, i) => await store.queue.submit(runOf(`q-${i}`, now + 2 + i))))
  t.equal(await store.queue.queuedCount(), 1201)
  t.equal(await store.listing.cancelQueued(SCOPE), 1201)
  t.equal(await store.queue.start(taken, Date.now()), undefined, 'the taken run never starts')
  t.equal(await store.queue.queuedCount(), 0)
  t.equal(await redis.probe.get('as:{p/a}:queued-bytes'), '0')
  t.equal(await redis.probe.xlen('as:{p/a}:queue'), 1, 'the running run\'s entry alone')
  const canceled = await store.listing.list(SCOPE, { statuses: ['canceled'], after: undefined, limit: 1000 })
  t.equal(canceled.records.length, 1000)
  t.same(Object.keys(canceled.records[0] ?? {}), ['run_id', 'status', 'created_at', 'completed_at', 'error'])
  t.ok((await redis.probe.ttl('as:{p/a}:run:q-0')) > 0, 'a canceled run expires with the retention')
  t.equal((await store.records.get(SCOPE, 'running')).record.status, 'running')
  t.equal(await store.listing.cancelQueued(SCOPE), 0)
})
