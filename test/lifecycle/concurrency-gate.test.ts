import t from 'tap'
import { ConcurrencyGate, type Release } from '../../src/lifecycle/concurrency-gate.ts'
import { AppNotReadyError, QueueFullError } from '../../src/errors.ts'

function gate (limit: number, depth: number): { gate: ConcurrencyGate, inflight: () => number, queued: () => number } {
  let inflight = 0
  let queued = 0
  const g = new ConcurrencyGate(limit, depth, { inflight: d => { inflight += d }, queued: d => { queued += d } })
  return { gate: g, inflight: () => inflight, queued: () => queued }
}

const never = new AbortController().signal

t.test('shut until open(): calls wait, then go through in arrival order', async t => {
  const { gate: g, inflight, queued } = gate(0, 10)
  t.equal(g.tryAcquire(), undefined, 'no fast path before the app is ready')
  const order: number[] = []
  const waits = [1, 2, 3].map(async n => { const release = await g.acquire(never); order.push(n); return release })
  t.equal(queued(), 3)
  t.equal(g.waiting, 3)
  g.open()
  const releases = await Promise.all(waits)
  t.same(order, [1, 2, 3])
  t.equal(inflight(), 3)
  t.equal(queued(), 0)
  for (const release of releases) release()
  t.equal(inflight(), 0)
})

t.test('at most `limit` in flight; FIFO hand-over; a release twice frees one slot', async t => {
  const { gate: g, inflight } = gate(2, 10)
  g.open()
  const a = g.tryAcquire() as Release
  const b = g.tryAcquire() as Release
  t.type(a, 'function')
  t.type(b, 'function')
  t.equal(g.tryAcquire(), undefined, 'full')
  const granted: string[] = []
  const c = g.acquire(never).then(r => { granted.push('c'); return r })
  const d = g.acquire(never).then(r => { granted.push('d'); return r })
  t.equal(g.tryAcquire(), undefined, 'no overtaking while others wait')
  a()
  a()
  const releaseC = await c
  t.same(granted, ['c'])
  t.equal(inflight(), 2)
  b()
  const releaseD = await d
  t.same(granted, ['c', 'd'])
  releaseC()
  releaseD()
  t.equal(inflight(), 0)
  t.equal(g.inflight, 0)
})

t.test('a full queue is 503 with Retry-After, at once', async t => {
  const { gate: g } = gate(1, 2)
  g.open()
  const held = g.tryAcquire() as Release
  const waiting = [g.acquire(never), g.acquire(never)]
  let caught: unknown
  try { await g.acquire(never) } catch (error) { caught = error }
  t.type(caught, QueueFullError)
  t.equal((caught as QueueFullError).status, 503)
  t.same((caught as QueueFullError).headers, { 'retry-after': '1' })
  held()
  ;(await waiting[0] as Release)()
  ;(await waiting[1] as Release)()
})

t.test('an aborted wait leaves the queue at once and frees its place', async t => {
  const { gate: g, queued, inflight } = gate(1, 2)
  g.open()
  const held = g.tryAcquire() as Release
  const controller = new AbortController()
  const first = g.acquire(controller.signal)
  const second = g.acquire(never)
  t.equal(g.waiting, 2)
  const reason = new Error('deadline')
  controller.abort(reason)
  await t.rejects(first, reason)
  t.equal(g.waiting, 1)
  t.equal(queued(), 1)
  const third = g.acquire(never) // the freed place can be taken
  held()
  const releaseSecond = await second
  t.equal(inflight(), 1, 'the aborted waiter got nothing')
  releaseSecond()
  ;(await third)()
  t.equal(inflight(), 0)
  t.equal(queued(), 0)
})

t.test('a wait whose signal aborted before it began is refused at once with its reason; a free slot is still taken', async t => {
  const g = gate(1, 10)
  g.gate.open()
  const aborted = new AbortController()
  aborted.abort(new Error('given up already'))
  const held = await g.gate.acquire(aborted.signal)
  t.equal(g.inflight(), 1, 'a free slot: taken on the fast path, whatever the signal')
  await t.rejects(g.gate.acquire(aborted.signal), { message: 'given up already' })
  t.equal(g.queued(), 0, 'never queued')
  held()
  t.equal(g.inflight(), 0)
})

t.test('many waiters: every one served once, in order, the queue array compacts', async t => {
  const { gate: g, inflight } = gate(3, 5000)
  g.open()
  const served: number[] = []
  let rejected = 0
  let concurrent = 0
  let peak = 0
  const work = Array.from({ length: 3000 }, async (_, i) => {
    const aborted = i % 7 === 0 ? new AbortController() : undefined
    const wait = g.acquire(aborted?.signal ?? never)
    aborted?.abort(new Error('gone'))
    let release: Release
    try { release = await wait } catch { rejected++; return }
    concurrent++
    peak = Math.max(peak, concurrent)
    served.push(i)
    await new Promise(resolve => setImmediate(resolve))
    concurrent--
    release()
  })
  await Promise.all(work)
  t.equal(peak, 3)
  // the first three got a slot at once, so aborting #0 changed nothing; every later 7th left the queue
  t.equal(rejected, Math.ceil(3000 / 7) - 1)
  t.equal(served.length, 3000 - rejected)
  t.same(served, [...served].sort((a, b) => a - b), 'first come, first served')
  t.equal(inflight(), 0)
  t.equal(g.waiting, 0)
})

t.test('a ready timeout: a call waiting for an app never ready is refused AppNotReadyError; one granted before it is not', async t => {
  let queued = 0
  const g = new ConcurrencyGate(0, 10, { inflight: () => {}, queued: d => { queued += d } }, 0, 30)
  await t.rejects(g.acquire(never), AppNotReadyError)
  t.equal(g.waiting, 0)
  t.equal(queued, 0, 'it left the queue')
  const granted = g.acquire(never)
  g.open()
  const release = await granted
  await new Promise(resolve => setTimeout(resolve, 60)) // past the bound: nothing fires for a granted call
  t.equal(g.inflight, 1)
  release()
  const opened = await g.acquire(never)
  t.equal(g.inflight, 1, 'once open, the bound no longer applies')
  opened()
})
