import t from 'tap'
import type { TakenRun } from '../../../src/runs/run-data.ts'
import { CappedRuns } from '../../../src/runs/runner/capped-runs.ts'
import { holdSlot, memoryStore, runnerKit, scope, settle, sharedStore, submit, takenRun, testApp, within } from './runner-kit.ts'

// CappedRuns alone over runs the real memory queue handed out, then as the runner uses it with a
// shared store (one that cannot pass a capped caller's runs over in its queue).

const ids = (runs: ReadonlyArray<TakenRun | undefined>): Array<string | undefined> => runs.map(run => run?.runId)

t.test('each caller\'s runs come back in the order they were set aside, one per call that ends', async t => {
  const store = await memoryStore(t)
  const capped = new CappedRuns()
  for (const [runId, caller] of [['a1', 'a'], ['b1', 'b'], ['a2', 'a'], ['a3', 'a']] as const) capped.park(await takenRun(store, { runId, caller }))
  t.equal(capped.next('c'), undefined, 'a caller with none set aside')
  t.same(ids([capped.next('a')]), ['a1'])
  t.same(ids([capped.next('b'), capped.next('b')]), ['b1', undefined], 'b\'s one run, then none')
  t.same(ids([capped.next('a'), capped.next('a'), capped.next('a')]), ['a2', 'a3', undefined])
  t.same(capped.takeAll(), [], 'nothing left')
})

t.test('takeAll gives every run set aside, once; the queue takes them back', async t => {
  const store = await memoryStore(t)
  const capped = new CappedRuns()
  for (const [runId, caller] of [['a1', 'a'], ['b1', 'b'], ['a2', 'a']] as const) capped.park(await takenRun(store, { runId, caller }))
  t.equal(await store.queue.queuedCount(), 3, 'set aside, they still wait: taken, not started')
  const all = capped.takeAll()
  t.same(ids(all).sort(), ['a1', 'a2', 'b1'])
  t.same(capped.takeAll(), [], 'cleared')
  t.equal(capped.next('a'), undefined)
  for (const run of all) await store.queue.release(run)
  const again: TakenRun[] = []
  for (let i = 0; i < 3; i++) again.push(await within(store.queue.take(AbortSignal.timeout(1000)), 'take'))
  t.same(ids(again).sort(), ['a1', 'a2', 'b1'], 'each can be taken again')
  for (const run of again) t.equal((await store.queue.start(run, Date.now()))?.runId, run.runId, `${run.runId} starts`)
})

t.test('in the runner (shared store): runs set aside while their caller is capped run one per call that ends; one canceled meanwhile is skipped', async t => {
  const app = await testApp(t)
  const memory = await memoryStore(t)
  const kit = await runnerKit(t, app, { replicaConcurrency: 4, callerLimit: 1, store: sharedStore(memory) })
  const aCall = await holdSlot(kit.gate, 'a')
  for (const runId of ['a1', 'a2', 'a3']) await submit(memory, { runId, caller: 'a' })
  await submit(memory, { runId: 'b1', caller: 'b' })
  t.equal((await app.arrived(1)).headers['x-request-id'], 'b1', 'b is not held up behind a')
  await settle()
  t.same(await Promise.all(['a1', 'a2', 'a3'].map(async id => (await memory.records.get(scope, id)).record.status)), ['queued', 'queued', 'queued'])
  await memory.records.cancel(scope, 'a1') // set aside, then canceled: its turn passes at once to the next
  aCall()
  const a2 = await app.arrived(2)
  t.equal(a2.headers['x-request-id'], 'a2', 'the caller\'s next run takes the slot its call left')
  t.equal(kit.gate.capped('a'), true, 'a2 holds a\'s one slot')
  t.equal((await memory.records.get(scope, 'a3')).record.status, 'queued', 'a3 waits for it')
  a2.res.writeHead(200).end('{}')
  t.equal((await app.arrived(3)).headers['x-request-id'], 'a3', 'then a3')
  t.equal(app.requests.length, 3, 'a1 never reached the app')
})
