import t from 'tap'
import { MemoryRunStore } from '../../../src/runs/store/memory/memory-run-store.ts'
import type { NewRun, TakenRun } from '../../../src/runs/run-data.ts'

// The memory queue's order: by urgency, then round robin across callers, each caller's own in
// submission order; a run given back keeps its place; canceled runs and capped callers are passed over.

const scope = { projectId: 'p', appName: 'a' }
const never = new AbortController().signal

function storeOf (): MemoryRunStore {
  return new MemoryRunStore({ retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1 << 20, queueDepth: 1000, queueMaxBytes: 1 << 20, scope })
}

function run (runId: string, urgency?: number): NewRun {
  return { scope, runId, request: { method: 'POST', path: '/', headers: [], body: null }, webhook: undefined, createdAt: Date.now(), urgency, caller: runId.charAt(0) }
}

async function takeAll (store: MemoryRunStore, n: number): Promise<string[]> {
  const ids: string[] = []
  for (let i = 0; i < n; i++) ids.push((await store.queue.take(never)).runId)
  return ids
}

t.test('by urgency, then round robin across callers; no urgency: 3', async t => {
  const store = storeOf()
  t.teardown(() => store.close())
  for (const [id, u] of [['a1', 3], ['a2', 3], ['a3', 3], ['b1', 3], ['c1', 6], ['d1', 0], ['b2', undefined]] as const) await store.queue.submit(run(id, u))
  t.equal(store.queue.nextUrgency?.(), 0)
  t.same(await store.queue.queuedByUrgency(), [1, 0, 0, 5, 0, 0, 1, 0])
  t.same(await takeAll(store, 7), ['d1', 'a1', 'b1', 'a2', 'b2', 'a3', 'c1'])
  t.equal(store.queue.nextUrgency?.(), undefined)
})

t.test('a run given back keeps its place; a canceled one is passed over; counts follow starts and cancels', async t => {
  const store = storeOf()
  t.teardown(() => store.close())
  for (const id of ['a1', 'a2', 'b1', 'b2']) await store.queue.submit(run(id, 2))
  const first = await store.queue.take(never)
  t.equal(first.runId, 'a1')
  await store.queue.release(first)
  await store.records.cancel(scope, 'b1')
  t.same((await store.queue.queuedByUrgency())[2], 3, 'b1 left the count')
  const taken: TakenRun[] = []
  for (let i = 0; i < 3; i++) taken.push(await store.queue.take(never))
  t.same(taken.map(r => r.runId), ['a1', 'b2', 'a2'])
  for (const r of taken) await store.queue.start(r, Date.now())
  t.same((await store.queue.queuedByUrgency())[2], 0)
})

t.test('a capped caller\'s runs are passed over, in their place, until callerFreed', async t => {
  const store = storeOf()
  t.teardown(() => store.close())
  const capped = new Set(['a'])
  store.queue.capCallers?.(caller => capped.has(caller))
  for (const id of ['a1', 'a2', 'b1']) await store.queue.submit(run(id, 0))
  t.same(await takeAll(store, 1), ['b1'])
  const waiting = store.queue.take(never)
  capped.delete('a')
  store.queue.callerFreed?.('a')
  t.equal((await waiting).runId, 'a1', 'a waiting take gets it as the caller is freed')
  t.same(await takeAll(store, 1), ['a2'])
})
