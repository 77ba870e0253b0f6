import t from 'tap'
import { ConcurrencyGate } from '../../src/lifecycle/concurrency-gate.ts'
import type { CallRecord } from '../../src/call/call-record.ts'
import { takeSlot } from '../../src/call/take-slot.ts'

const quiet = { inflight: () => {}, queued: () => {} }

/** What takeSlot reads of a call, counting how often its signal is asked for (each first ask makes an AbortController). */
function fakeCall (): { call: CallRecord, signalReads: () => number, abort: (reason: Error) => void, released: () => void } {
  const controller = new AbortController()
  let reads = 0
  const cleanups: Array<() => void> = []
  const call = {
    settled: false,
    fairCaller: 'caller',
    urgency: 3,
    get signal () { reads++; return controller.signal },
    waited () {},
    onClose (free: () => void) { cleanups.push(free) }
  }
  return { call: call as unknown as CallRecord, signalReads: () => reads, abort: reason => { controller.abort(reason) }, released: () => { for (const free of cleanups) free() } }
}

t.test('a free slot is taken without the call\'s signal (no AbortController per plain call)', async t => {
  const gate = new ConcurrencyGate(0, 10, quiet)
  gate.open()
  const { call, signalReads, released } = fakeCall()
  const slot = takeSlot(gate, call)
  t.type(slot, 'function', 'the slot at once, not a promise')
  t.equal(signalReads(), 0, 'the signal never asked for')
  t.equal(gate.inflight, 1)
  released()
  t.equal(gate.inflight, 0, 'freed as the call closes')
})

t.test('a wait for a slot ends with the call\'s signal', async t => {
  const gate = new ConcurrencyGate(1, 10, quiet)
  gate.open()
  const holder = gate.tryAcquire('other')
  t.ok(holder)
  const { call, signalReads, abort } = fakeCall()
  const slot = takeSlot(gate, call)
  t.ok(slot instanceof Promise, 'it waits')
  t.equal(signalReads(), 1, 'the signal asked for once the call waits')
  abort(new Error('deadline'))
  await t.rejects(slot as Promise<unknown>, { message: 'deadline' })
  t.equal(gate.waiting, 0)
})
