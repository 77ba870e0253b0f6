// sidecar_async_queued_runs and sidecar_async_running_runs as the run store counts them
// (docs/metrics.md, "Runs"): runs waiting, exact after cancels and runs given back; runs taken
// (a take starts a run) until they end.
import t, { type Test } from 'tap'
import { MemoryRunStore } from '../../../src/runs/store/memory/memory-run-store.ts'
import { RedisRunStore } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import type { NewRun } from '../../../src/runs/run-data.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'

const SCOPE = { projectId: 'p', appName: 'a' }
const SETTINGS = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 100, queueMaxBytes: 1024 * 1024, scope: SCOPE }
const newRun = (runId: string, scope = SCOPE): NewRun => ({ scope, runId, request: { method: 'POST', path: '/x', headers: [], body: Buffer.from('b') }, webhook: undefined, createdAt: Date.now() })
const ended = { status: 'succeeded', statusCode: 200, resultJson: '{}', runTimeMs: 1, error: undefined, completedAt: Date.now() } as const

async function counts (store: RunStore): Promise<[number, number]> {
  return [await store.queue.queuedCount(), await store.queue.runningCount()]
}

async function countsSuite (t: Test, store: RunStore, other: RunStore): Promise<void> {
  for (const id of ['c-1', 'c-2', 'c-3', 'c-4']) await store.queue.submit(newRun(id))
  await other.queue.submit(newRun('elsewhere', { projectId: 'p', appName: 'other' }))
  t.same(await counts(store), [4, 0], 'four waiting; another app\'s run is not counted')
  const signal = new AbortController().signal
  const first = await store.queue.take(signal)
  t.same(await counts(store), [3, 1], 'a taken run has started (one step): one in progress')
  t.equal((await store.queue.start(first, Date.now()))?.runId, first.runId, 'it goes to the app')
  t.same(await counts(store), [3, 1])
  await store.records.cancel(SCOPE, 'c-4')
  t.same(await counts(store), [2, 1], 'a queued run canceled: one less waiting')
  const second = await store.queue.take(signal)
  t.same(await counts(store), [1, 2])
  await store.queue.release(second)
  t.same(await counts(store), [2, 1], 'given back: waiting again')
  const again = await store.queue.take(signal)
  await store.queue.start(again, Date.now())
  await store.records.cancel(SCOPE, again.runId)
  t.same(await counts(store), [1, 1], 'a running run canceled: one less in progress')
  await store.records.finish(first, ended)
  t.same(await counts(store), [1, 0], 'a run ended')
}

t.test('memory', async t => {
  const store = new MemoryRunStore(SETTINGS)
  t.teardown(async () => { await store.close() })
  await countsSuite(t, store, store)
})

t.test('redis: the same counts on two stores sharing it', async t => {
  const redis = await startPrivateRedis(t)
  const [a, b] = [new RedisRunStore(redis.url, SETTINGS), new RedisRunStore(redis.url, { ...SETTINGS, scope: { projectId: 'p', appName: 'other' } })]
  t.teardown(async () => { await a.close(); await b.close() })
  await Promise.all([a.reachable(5000), b.reachable(5000)])
  await countsSuite(t, a, b)
  const c = new RedisRunStore(redis.url, SETTINGS)
  t.teardown(async () => { await c.close() })
  await c.reachable(5000)
  t.same(await counts(c), [1, 0], 'another replica of the app reads the same')
})
