import t, { type Test } from 'tap'
import type { TakenRun } from '../../../src/runs/run-data.ts'
import { RunPrefetch } from '../../../src/runs/runner/run-prefetch.ts'
import type { RunQueue } from '../../../src/runs/store/run-queue.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import { memoryStore, scope, settle, sharedView, submit, within } from './runner-kit.ts'

// RunPrefetch alone, over the real memory queue: as it is (in memory nothing is taken ahead), and
// as a shared store presents it (sharedView: taken ahead, one per run at the app, held at most 1 s).

const never = new AbortController().signal

function prefetchOf (t: Test, queue: RunQueue): RunPrefetch {
  const prefetch = new RunPrefetch(queue)
  t.teardown(async () => { await prefetch.releaseAll() })
  return prefetch
}

async function submitAll (store: RunStore, runs: ReadonlyArray<string | readonly [string, number]>): Promise<void> {
  for (const run of runs) {
    const [runId, urgency] = typeof run === 'string' ? [run, undefined] : run
    await submit(store, { runId, ...(urgency === undefined ? {} : { urgency }) })
  }
}

const next = async (prefetch: RunPrefetch, signal = never): Promise<string> => (await within(prefetch.next(signal), 'the next run')).runId

t.test('memory (not shared): next() takes from the queue itself; nothing is taken ahead, however many runs are at the app', async t => {
  const store = await memoryStore(t)
  await submitAll(store, [['r1', 3], ['r2', 3], ['r3', 5]])
  const prefetch = prefetchOf(t, store.queue)
  t.equal(prefetch.nextUrgency(), 3, 'the queue\'s next')
  t.equal(await next(prefetch), 'r1')
  prefetch.started(never)
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 0, 'none held')
  t.equal(await next(prefetch), 'r2')
  t.equal(prefetch.nextUrgency(), 5)
  prefetch.ended(never)
  await settle()
  t.equal(prefetch.size, 0)
  t.equal(await next(prefetch), 'r3')
  t.equal(prefetch.nextUrgency(), undefined, 'none queued')
})

t.test('memory: a run put back goes back to its place in the queue, behind a more urgent one', async t => {
  const store = await memoryStore(t)
  await submitAll(store, [['r3', 3], ['later', 3]])
  const prefetch = prefetchOf(t, store.queue)
  const taken = await within(prefetch.next(never), 'take')
  t.equal(taken.runId, 'r3')
  await submitAll(store, [['r0', 0]])
  prefetch.putBack(taken)
  t.equal(prefetch.size, 0, 'not held: back in the queue')
  t.same([await next(prefetch), await next(prefetch), await next(prefetch)], ['r0', 'r3', 'later'])
})

t.test('shared: one run taken ahead per run at the app, never more; a run ending takes none more while enough are held', async t => {
  const store = await memoryStore(t)
  await submitAll(store, ['r1', 'r2', 'r3', 'r4', 'r5'])
  const prefetch = prefetchOf(t, sharedView(store.queue))
  t.equal(await next(prefetch), 'r1', 'taken for the free slot')
  await settle()
  t.equal(prefetch.size, 0, 'nothing at the app yet: nothing ahead')

  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 1, 'one at the app: one held')
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 2, 'two at the app: two held')
  await settle()
  t.equal(prefetch.size, 2, 'and no more')
  t.same(await Promise.all(['r2', 'r3'].map(async id => (await store.records.get(scope, id)).record.status)), ['queued', 'queued'], 'held, not started')
  t.equal(prefetch.nextUrgency(), 3, 'the held run\'s urgency')

  prefetch.ended(never)
  prefetch.ended(never)
  await settle()
  t.equal(prefetch.size, 2, 'a run ending takes nothing when enough are held')
  t.same([await next(prefetch), await next(prefetch)], ['r2', 'r3'], 'held runs first, in the order taken, at once')
  t.equal(await next(prefetch), 'r4', 'then a take')
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 1)
  t.equal(await next(prefetch), 'r5')
})

t.test('shared: a run held past 1 s goes back to the queue for another replica; none is taken ahead again until a run ends', async t => {
  const store = await memoryStore(t)
  await submitAll(store, ['long-wait'])
  const prefetch = prefetchOf(t, sharedView(store.queue))
  const heldAt = Date.now() // the clock the hold is measured by
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 1)
  const elsewhere = await within(store.queue.take(AbortSignal.timeout(3000)), 'another replica takes it', 3000)
  const heldFor = Date.now() - heldAt
  t.equal(elsewhere.runId, 'long-wait')
  t.ok(heldFor > 1000 && heldFor < 2500, `given back after ${heldFor} ms`)
  t.equal(prefetch.size, 0)

  await submitAll(store, ['next'])
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 0, 'no take ahead: the runs at the app are long ones')
  t.equal(prefetch.nextUrgency(), undefined, 'a shared queue cannot tell the next urgency')
  prefetch.ended(never)
  await settle()
  t.equal(prefetch.size, 1, 'a run ended: taking ahead again')
  t.equal(await next(prefetch), 'next')
})

t.test('shared: next() waiting on a take gets a run put back at once; the take\'s run is held for the one after', async t => {
  const store = await memoryStore(t)
  await submitAll(store, ['back'])
  const back: TakenRun = await within(store.queue.take(never), 'take')
  const prefetch = prefetchOf(t, sharedView(store.queue))
  const waiting = prefetch.next(never)
  await settle()
  prefetch.putBack(back)
  t.equal((await within(waiting, 'next')).runId, 'back', 'not behind the take under way')
  await submitAll(store, ['taken'])
  await settle()
  t.equal(prefetch.size, 1, 'the take under way brought the new run')
  t.equal(await next(prefetch), 'taken')
})

t.test('next() rejects with its take\'s failure, or the signal\'s reason', async t => {
  const store = await memoryStore(t)
  const shared = prefetchOf(t, sharedView(store.queue))
  const failing = shared.next(never)
  await settle()
  await store.close()
  await t.rejects(within(failing, 'next'), { message: 'run store closed' }, 'shared: the failure of its own take')

  const other = await memoryStore(t)
  const stop = new AbortController()
  const sharedWait = prefetchOf(t, sharedView(other.queue)).next(stop.signal)
  const memoryWait = prefetchOf(t, other.queue).next(stop.signal)
  stop.abort(new Error('stopping'))
  await t.rejects(within(sharedWait, 'next'), { message: 'stopping' })
  await t.rejects(within(memoryWait, 'next'), { message: 'stopping' })
  const aborted = prefetchOf(t, sharedView(other.queue))
  aborted.started(stop.signal)
  await settle()
  t.equal(aborted.size, 0, 'nothing is taken ahead once stopping')
})

t.test('a take ahead that fails stops taking ahead: no loop of failing takes', async t => {
  const store = await memoryStore(t)
  const prefetch = prefetchOf(t, sharedView(store.queue))
  await store.close()
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 0)
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 0, 'no take after the failed one')
  await t.rejects(within(prefetch.next(never), 'next'), { message: 'run store closed' })
})

t.test('releaseAll gives every held run back to the queue', async t => {
  const store = await memoryStore(t)
  await submitAll(store, ['h1', 'h2', 'h3'])
  const prefetch = prefetchOf(t, sharedView(store.queue))
  prefetch.started(never)
  prefetch.started(never)
  await settle()
  t.equal(prefetch.size, 2)
  await within(prefetch.releaseAll(), 'released')
  t.equal(prefetch.size, 0)
  const again = [await within(store.queue.take(never), 'take'), await within(store.queue.take(never), 'take'), await within(store.queue.take(never), 'take')]
  t.same(again.map(run => run.runId).sort(), ['h1', 'h2', 'h3'], 'each can be taken again')
  t.same(again.slice(0, 2).map(run => run.runId).sort(), ['h1', 'h2'], 'ahead of the run never taken')
})
