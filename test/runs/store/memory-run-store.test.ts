import t from 'tap'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { MemoryRunStore } from '../../../src/runs/store/memory/memory-run-store.ts'
import { runStoreSuite } from './run-store-suite.ts'

t.test('memory run store', async t => {
  runStoreSuite(t, async settings => new MemoryRunStore(settings))
})

t.test('close rejects waiting takes and ends followers', async t => {
  const store = new MemoryRunStore({ retentionSeconds: 60, maxEvents: 10, queueDepth: 10, scope: undefined })
  const waiting = store.queue.take(AbortSignal.timeout(5000))
  await store.queue.submit({ scope: { projectId: 'p', appName: 'a' }, runId: 'r1', request: { method: 'GET', path: '/', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
  t.equal((await waiting).runId, 'r1', 'a store without a scope serves every scope')
  const next = store.queue.take(AbortSignal.timeout(5000))
  const follower = (await store.records.follow({ projectId: 'p', appName: 'a' }, 'r1', -1, AbortSignal.timeout(5000)))[Symbol.asyncIterator]().next()
  await store.close()
  await t.rejects(next, { message: 'run store closed' })
  t.same(await follower, { done: true, value: undefined })
  await t.rejects(store.queue.take(AbortSignal.timeout(1000)), { message: 'run store closed' })
})

t.test('a finished run keeps its record and result, not its request body', async t => {
  setFlagsFromString('--expose-gc')
  const gc = runInNewContext('gc') as () => void
  const store = new MemoryRunStore({ retentionSeconds: 60, maxEvents: 10, queueDepth: 10, scope: undefined })
  const scope = { projectId: 'p', appName: 'a' }
  const submit = async (runId: string, body: Buffer): Promise<void> => {
    await store.queue.submit({ scope, runId, request: { method: 'POST', path: '/run', headers: [], body }, webhook: undefined, createdAt: Date.now() })
  }
  // each run's body is referenced only by the store once these return
  const finished = async (): Promise<WeakRef<Buffer>> => {
    const body = Buffer.alloc(1024 * 1024, 'done')
    await submit('done', body)
    const taken = await store.queue.take(AbortSignal.timeout(5000))
    t.equal(taken.request.body, body, 'the taker gets the body')
    await store.queue.start(taken, Date.now())
    await store.records.finish(taken, { status: 'succeeded', statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 1, error: undefined, completedAt: Date.now() })
    return new WeakRef(body)
  }
  const canceled = async (): Promise<WeakRef<Buffer>> => {
    const body = Buffer.alloc(1024 * 1024, 'gone')
    await submit('canceled', body)
    await store.records.cancel(scope, 'canceled')
    return new WeakRef(body)
  }
  const bodies = [await finished(), await canceled()]
  await submit('queued', Buffer.from('kept')) // a queued run keeps its body until it is taken
  await new Promise(resolve => setImmediate(resolve))
  gc()
  t.same(bodies.map(body => body.deref() === undefined), [true, true], 'both bodies were collected')
  const done = await store.records.get(scope, 'done')
  t.equal(done.record.status, 'succeeded')
  t.equal(done.resultJson, '{"ok":true}')
  t.equal((await store.records.get(scope, 'canceled')).record.status, 'canceled')
  t.equal((await store.queue.take(AbortSignal.timeout(5000))).request.body?.toString(), 'kept')
})
