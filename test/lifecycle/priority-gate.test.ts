import t from 'tap'
import { ConcurrencyGate, type Release } from '../../src/lifecycle/concurrency-gate.ts'

// The gate's order: by urgency (0 first), then round robin across callers, each caller's own in
// order; CALLER_MAX_INFLIGHT makes a caller's next call wait while the others go ahead.

const never = new AbortController().signal
const quiet = { inflight: () => {}, queued: () => {} }

function openGate (limit: number, callerLimit = 0, depth = 1000): ConcurrencyGate {
  const gate = new ConcurrencyGate(limit, depth, quiet, callerLimit)
  gate.open()
  return gate
}

/** Queues `name` (caller is its first letter) and records it in `order` when it gets its slot. */
function wait (gate: ConcurrencyGate, order: string[], name: string, urgency = 3, signal = never): Promise<Release> {
  return gate.acquire(signal, urgency, name.charAt(0)).then(release => { order.push(name); return release })
}

/** Lets every promise already settled run its callbacks. */
const settle = async (): Promise<void> => { await new Promise(resolve => setImmediate(resolve)) }

/** Like wait(), but the slot is freed as soon as it is recorded: one release drains the queue in the gate's order. */
async function passThrough (gate: ConcurrencyGate, order: string[], name: string, urgency = 3): Promise<void> {
  (await wait(gate, order, name, urgency))()
}

t.test('a waiting call of urgency u goes before every waiting one of urgency > u, whatever the arrival order', async t => {
  const gate = openGate(1)
  const held = gate.tryAcquire('x') as Release
  const order: string[] = []
  const waits = [passThrough(gate, order, 'a7', 7), passThrough(gate, order, 'b3', 3), passThrough(gate, order, 'c0', 0), passThrough(gate, order, 'd3', 3), passThrough(gate, order, 'e1', 1)]
  held()
  await Promise.all(waits)
  t.same(order, ['c0', 'e1', 'b3', 'd3', 'a7'])
})

t.test('within one urgency: round robin across callers, each caller\'s own in order', async t => {
  const gate = openGate(1)
  const held = gate.tryAcquire('x') as Release
  const order: string[] = []
  const names = ['a1', 'a2', 'a3', 'a4', 'b1', 'b2', 'c1']
  const waits = names.map(async name => { await passThrough(gate, order, name) })
  held()
  await Promise.all(waits)
  t.same(order, ['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4'])
})

t.test('urgency first, then the round: a caller with a backlog of 20 does not delay another caller\'s one call by more than one', async t => {
  const gate = openGate(1)
  const held = gate.tryAcquire('x') as Release
  const order: string[] = []
  const waits: Array<Promise<void>> = []
  for (let i = 1; i <= 20; i++) waits.push(passThrough(gate, order, `a${i}`))
  waits.push(passThrough(gate, order, 'b1'), passThrough(gate, order, 'z1', 6))
  held()
  await Promise.all(waits)
  t.same(order.slice(0, 3), ['a1', 'b1', 'a2'])
  t.equal(order[order.length - 1], 'z1', 'the least urgent last')
})

t.test('CALLER_MAX_INFLIGHT: a capped caller waits (not refused) while others go ahead; served when one of its calls ends', async t => {
  const gate = openGate(4, 1)
  const a1 = gate.tryAcquire('a') as Release
  t.type(a1, 'function')
  t.equal(gate.tryAcquire('a'), undefined, 'a holds its one slot: no fast path')
  t.equal(gate.capped('a'), true)
  const order: string[] = []
  const a2 = wait(gate, order, 'a2')
  const b1 = wait(gate, order, 'b1')
  await settle()
  t.same(order, ['b1'], 'b goes ahead; a2 waits though slots are free')
  t.equal(gate.waiting, 1)
  const c1 = gate.tryAcquire('c')
  t.type(c1, 'function', 'only a capped caller waits: another caller\'s call takes a free slot at once')
  c1?.()
  t.equal(gate.busiestCallerInflight, 1)
  a1()
  await settle()
  t.same(order, ['b1', 'a2'], 'a2 gets its slot as a1 ends')
  ;(await a2)()
  ;(await b1)()
  t.equal(gate.inflight, 0)
  t.equal(gate.busiestCallerInflight, 0)
})

t.test('CALLER_MAX_INFLIGHT of 2: the busiest caller\'s count, and its waiters skipped in the round', async t => {
  const gate = openGate(3, 2)
  const order: string[] = []
  const held = [gate.tryAcquire('a') as Release, gate.tryAcquire('a') as Release, gate.tryAcquire('b') as Release]
  t.equal(gate.busiestCallerInflight, 2)
  const a3 = wait(gate, order, 'a3')
  const b2 = wait(gate, order, 'b2')
  ;(held[2] as Release)() // b's slot frees: a is capped, b2 goes
  await settle()
  t.same(order, ['b2'])
  ;(held[0] as Release)()
  await settle()
  t.same(order, ['b2', 'a3'])
  ;(held[1] as Release)()
  ;(await a3)()
  ;(await b2)()
  t.equal(gate.busiestCallerInflight, 0)
})

t.test('an aborted waiter is dropped: it never gets a slot, and the next one does', async t => {
  const gate = openGate(1)
  const held = gate.tryAcquire('x') as Release
  const order: string[] = []
  const abort = new AbortController()
  const gone = wait(gate, order, 'a1', 0, abort.signal)
  const next = wait(gate, order, 'b1', 5)
  abort.abort(new Error('caller gone'))
  await t.rejects(gone, { message: 'caller gone' })
  t.equal(gate.waiting, 1)
  held()
  ;(await next)()
  t.same(order, ['b1'])
  t.equal(gate.inflight, 0)
})

t.test('async runs: a queued run of urgency u goes before waiting calls of urgency > u, after those of urgency <= u', async t => {
  const gate = openGate(1)
  const held = gate.tryAcquire('x') as Release
  const order: string[] = []
  const call5 = wait(gate, order, 'c5', 5)
  let runUrgency: number | undefined = 2
  const free = gate.whenSlotFree(never, () => runUrgency).then(() => { order.push('run') })
  held()
  await free
  t.same(order, ['run'], 'the slot is kept for the run of urgency 2')
  t.equal(gate.tryAcquireRun(5, 'r'), undefined, 'a run of urgency 5 would not get it: within an urgency, calls first')
  await settle()
  t.same(order, ['run', 'c5'], 'a failed tryAcquireRun hands the slot to the waiting call')
  ;(await call5)()
  // the other way round: the call is as urgent as the run
  const hold2 = gate.tryAcquire('x') as Release
  const call2 = wait(gate, order, 'd2', 2)
  runUrgency = 2
  const free2 = gate.whenSlotFree(never, () => runUrgency).then(() => { order.push('run2') })
  hold2()
  const release = await call2
  await settle()
  t.same(order, ['run', 'c5', 'd2'], 'a call of the run\'s urgency goes first')
  release()
  await free2
  const slot = gate.tryAcquireRun(2, 'r') as Release
  t.type(slot, 'function')
  slot()
  runUrgency = undefined
})

t.test('a run of unknown urgency yields to every waiting call', async t => {
  const gate = openGate(1)
  const held = gate.tryAcquire('x') as Release
  const order: string[] = []
  const call = wait(gate, order, 'c7', 7)
  const free = gate.whenSlotFree(never, () => undefined).then(() => { order.push('run') })
  held()
  ;(await call)()
  await free
  t.same(order, ['c7', 'run'])
})

/** Queues `n` waiters (1,000 callers, 8 urgencies) behind a held slot and serves them one by one: ms taken (signals made beforehand). */
async function queueAndServe (n: number): Promise<number> {
  const gate = new ConcurrencyGate(1, n, quiet, 0)
  gate.open()
  let release = gate.tryAcquire('x') as Release
  const granted: Release[] = []
  // each call has its own signal, as calls do (made beforehand: Node's AbortController is slow to make, not the gate)
  const signals = Array.from({ length: n }, () => new AbortController().signal)
  const started = performance.now()
  for (let i = 0; i < n; i++) void gate.acquire(signals[i] as AbortSignal, i % 8, `c${i % 1000}`).then(r => { granted.push(r) })
  for (let i = 0; i < n; i++) {
    release()
    await Promise.resolve() // the grant's callback
    await Promise.resolve()
    release = granted.pop() as Release
  }
  release()
  if (gate.waiting !== 0 || gate.inflight !== 0) throw new Error('not all served')
  return performance.now() - started
}

t.test('O(1) per operation: 100,000 waiters cost about 10 times 10,000 (a scan per operation would cost 100 times)', async t => {
  await queueAndServe(10_000) // warm-up
  const small = await queueAndServe(10_000)
  const large = await queueAndServe(100_000)
  t.ok(large < small * 30, `10,000 waiters in ${Math.round(small)} ms, 100,000 in ${Math.round(large)} ms`)
})

t.test('callers holding no slot are forgotten in sweeps; a caller holding slots is still counted and capped after them', async t => {
  const gate = openGate(0, 2)
  const a = [gate.tryAcquire('a') as Release, gate.tryAcquire('a') as Release]
  for (let i = 0; i < 5000; i++) (gate.tryAcquire(`c${i}`) as Release)()
  t.equal(gate.busiestCallerInflight, 2)
  t.equal(gate.capped('a'), true)
  t.equal(gate.tryAcquire('a'), undefined)
  const order: string[] = []
  const a3 = wait(gate, order, 'a3')
  ;(a[0] as Release)()
  ;(await a3)()
  t.same(order, ['a3'])
  ;(a[1] as Release)()
  t.equal(gate.busiestCallerInflight, 0)
})
