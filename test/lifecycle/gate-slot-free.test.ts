import t from 'tap'
import { ConcurrencyGate, type Release } from '../../src/lifecycle/concurrency-gate.ts'

// whenSlotFree is how async runs yield to calls: it resolves only once the gate is open, a slot
// is free and no call waits for one.

const never = new AbortController().signal
const quiet = { inflight: () => {}, queued: () => {} }

/** Whether `promise` has settled, and how, after everything already queued has run. */
async function state (promise: Promise<unknown>): Promise<'pending' | 'resolved' | 'rejected'> {
  let seen: 'pending' | 'resolved' | 'rejected' = 'pending'
  promise.then(() => { seen = 'resolved' }, () => { seen = 'rejected' })
  await new Promise(resolve => setImmediate(resolve))
  return seen
}

t.test('resolves at once when the gate is open, a slot is free and nobody waits', async t => {
  for (const limit of [0, 1, 3]) {
    const gate = new ConcurrencyGate(limit, 10, quiet)
    gate.open()
    t.equal(await state(gate.whenSlotFree(never)), 'resolved', `limit ${limit}`)
    t.equal(gate.inflight, 0, 'it takes no slot itself')
  }
})

t.test('waits while the gate is shut (before the app is first ready), then resolves on open()', async t => {
  for (const limit of [0, 2]) {
    const gate = new ConcurrencyGate(limit, 10, quiet)
    const free = gate.whenSlotFree(never)
    t.equal(await state(free), 'pending', `limit ${limit}: shut`)
    gate.open()
    t.equal(await state(free), 'resolved', `limit ${limit}: open`)
  }
})

t.test('waits while every slot is held; a release wakes every watcher', async t => {
  const gate = new ConcurrencyGate(2, 10, quiet)
  gate.open()
  const a = gate.tryAcquire() as Release
  const b = gate.tryAcquire() as Release
  const watchers = [gate.whenSlotFree(never), gate.whenSlotFree(never), gate.whenSlotFree(never)]
  t.same(await Promise.all(watchers.map(state)), ['pending', 'pending', 'pending'])
  a()
  t.same(await Promise.all(watchers.map(state)), ['resolved', 'resolved', 'resolved'])
  t.equal(gate.inflight, 1)
  // the async run's pattern: the slot it was told of is taken with tryAcquire
  const c = gate.tryAcquire()
  t.type(c, 'function')
  t.equal(await state(gate.whenSlotFree(never)), 'pending', 'full again')
  b()
  c?.()
})

t.test('a call waiting for a slot goes first: watchers wait until no call waits', async t => {
  const gate = new ConcurrencyGate(1, 10, quiet)
  gate.open()
  const held = gate.tryAcquire() as Release
  const watcher = gate.whenSlotFree(never)
  const call = gate.acquire(never)
  held()
  const callRelease = await call
  t.equal(gate.inflight, 1, 'the waiting call got the freed slot')
  t.equal(await state(watcher), 'pending', 'the watcher still waits')
  t.equal(gate.tryAcquire(), undefined)

  const second = gate.acquire(never)
  const third = gate.acquire(never)
  t.equal(gate.waiting, 2)
  callRelease()
  const secondRelease = await second
  secondRelease()
  const thirdRelease = await third
  t.equal(await state(watcher), 'pending', 'not while calls still come')
  thirdRelease()
  t.equal(await state(watcher), 'resolved', 'once the last waiting call went through and its slot came back')
  t.equal(gate.inflight, 0)
})

t.test('a waiting call that gives up (caller gone, deadline) no longer holds the watchers back', async t => {
  const gate = new ConcurrencyGate(1, 10, quiet)
  gate.open()
  const held = gate.tryAcquire() as Release
  const caller = new AbortController()
  const call = gate.acquire(caller.signal)
  const watcher = gate.whenSlotFree(never)
  caller.abort(new Error('deadline'))
  await t.rejects(call, { message: 'deadline' })
  t.equal(gate.waiting, 0)
  t.equal(await state(watcher), 'pending', 'the slot is still held')
  held()
  t.equal(await state(watcher), 'resolved', 'the freed slot goes to the watcher, the call having left')
  t.equal(gate.inflight, 0)
})

t.test('a waiting call aborted while a slot is free wakes the watchers', async t => {
  const gate = new ConcurrencyGate(1, 10, quiet)
  const caller = new AbortController()
  // before open(), the call waits for the app's first readiness
  const call = gate.acquire(caller.signal)
  const watcher = gate.whenSlotFree(never)
  t.equal(await state(watcher), 'pending')
  caller.abort(new Error('caller gone'))
  await t.rejects(call, { message: 'caller gone' })
  t.equal(await state(watcher), 'pending', 'still shut')
  gate.open()
  t.equal(await state(watcher), 'resolved')
  t.equal(gate.waiting, 0)
})

t.test('the signal aborts the wait with its reason; an aborted watcher is never woken', async t => {
  const gate = new ConcurrencyGate(1, 10, quiet)
  gate.open()
  const held = gate.tryAcquire() as Release
  const stop = new AbortController()
  const watcher = gate.whenSlotFree(stop.signal)
  const other = gate.whenSlotFree(never)
  const reason = new Error('sidecar stopping')
  stop.abort(reason)
  await t.rejects(watcher, reason)
  t.equal(await state(other), 'pending', 'the other watcher still waits')
  held()
  t.equal(await state(other), 'resolved')

  const already = new AbortController()
  already.abort(new Error('already stopped'))
  const full = new ConcurrencyGate(1, 10, quiet)
  full.open()
  const slot = full.tryAcquire() as Release
  await t.rejects(full.whenSlotFree(already.signal), { message: 'already stopped' }, 'an aborted signal rejects at once when it would wait')
  slot()
})

t.test('many watchers and waits do not pile up: each wake resolves only the watchers of that moment', async t => {
  const gate = new ConcurrencyGate(1, 10, quiet)
  gate.open()
  for (let round = 0; round < 100; round++) {
    const held = gate.tryAcquire() as Release
    const controllers = [new AbortController(), new AbortController()]
    const abandoned = controllers.map(c => gate.whenSlotFree(c.signal))
    const kept = gate.whenSlotFree(never)
    for (const c of controllers) c.abort(new Error('gone'))
    await Promise.allSettled(abandoned)
    held()
    await kept
  }
  t.equal(gate.inflight, 0)
  t.equal(gate.waiting, 0)
  t.equal(await state(gate.whenSlotFree(never)), 'resolved')
})
