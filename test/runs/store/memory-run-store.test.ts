import t from 'tap'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { MemoryRunStore } from '../../../src/runs/store/memory/memory-run-store.ts'
import { runStoreBoundsSuite } from './run-store-bounds-suite.ts'
import { runStoreSuite } from './run-store-suite.ts'

const SETTINGS = { retentionSeconds: 60, maxEvents: 10, maxEventBytes: 64 * 1024 * 1024, queueDepth: 10, queueMaxBytes: 256 * 1024 * 1024, scope: undefined }

t.test('memory run store', async t => {
  runStoreSuite(t, async settings => new MemoryRunStore(settings))
  runStoreBoundsSuite(t, async settings => new MemoryRunStore(settings))
})

t.test('close rejects waiting takes and ends followers', async t => {
  const store = new MemoryRunStore(SETTINGS)
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
  const store = new MemoryRunStore(SETTINGS)
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

t.test('a finished run larger than the retention budget is kept cut, not dropped: its oldest events go, the record keeps its shape, one warning', async t => {
  const store = new MemoryRunStore({ ...SETTINGS, maxEvents: 10_000, maxEventBytes: 1024 ** 3 })
  t.teardown(() => store.close())
  const cuts: string[] = []
  store.listen({ canceled: () => {}, lost: () => {}, expired: () => {}, availability: () => {}, truncated: (scope, runId, what) => { cuts.push(`${scope.projectId}/${scope.appName}/${runId}: ${what}`) } })
  const scope = { projectId: 'p', appName: 'a' }
  await store.queue.submit({ scope, runId: 'huge', request: { method: 'POST', path: '/run', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
  const taken = await store.queue.take(AbortSignal.timeout(5000))
  await store.queue.start(taken, Date.now())
  const mib = 'm'.repeat(1024 * 1024) // one string, kept 300 times: 300 MiB counted, 1 MiB held
  for (let n = 0; n < 300; n++) store.records.appendEvent(taken, n, mib)
  const finished = await store.records.finish(taken, { status: 'succeeded', statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 1, error: undefined, completedAt: Date.now() })
  const kept = await store.records.get(scope, 'huge')
  t.equal(kept.record.status, 'succeeded', 'readable right after it succeeded')
  t.same(kept.record, finished.record, 'the record as it ended: same fields, nothing added')
  t.equal(kept.resultJson, '{"ok":true}')
  const items = []
  for await (const item of await store.records.follow(scope, 'huge', -1, AbortSignal.timeout(5000))) items.push(item)
  const first = items[0]
  t.equal(first?.type, 'gap', 'a reader from the first event is told the oldest are no longer kept')
  const from = first?.type === 'gap' ? first.first : -1
  t.ok(from > 44 && from < 300, `the newest events are kept within the budget (from ${from})`)
  t.same(items.slice(1, -1).map(item => item.type === 'event' ? item.n : -1), Array.from({ length: 300 - from }, (_, i) => from + i))
  t.equal(items.at(-1)?.type, 'done')
  t.same(cuts, [`p/a/huge: events before ${from} cut to fit the finished runs' memory budget`])
})
