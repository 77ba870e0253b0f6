import t from 'tap'
import { MemoryRunStore } from '../../src/runs/memory-run-store.ts'
import { runStoreSuite } from './run-store-suite.ts'

t.test('memory run store', async t => {
  runStoreSuite(t, async settings => new MemoryRunStore(settings))
})

t.test('close rejects waiting takes and ends followers', async t => {
  const store = new MemoryRunStore({ retentionSeconds: 60, maxEvents: 10, queueDepth: 10, scope: undefined })
  const waiting = store.take(AbortSignal.timeout(5000))
  await store.submit({ scope: { projectId: 'p', appName: 'a' }, runId: 'r1', request: { method: 'GET', path: '/', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
  t.equal((await waiting).runId, 'r1', 'a store without a scope serves every scope')
  const next = store.take(AbortSignal.timeout(5000))
  const follower = (await store.follow({ projectId: 'p', appName: 'a' }, 'r1', -1, AbortSignal.timeout(5000)))[Symbol.asyncIterator]().next()
  await store.close()
  await t.rejects(next, { message: 'run store closed' })
  t.same(await follower, { done: true, value: undefined })
  await t.rejects(store.take(AbortSignal.timeout(1000)), { message: 'run store closed' })
})
