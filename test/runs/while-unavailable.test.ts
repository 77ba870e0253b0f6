import t from 'tap'
import { RunStoreUnavailableError } from '../../src/errors.ts'
import { whileUnavailable } from '../../src/runs/while-unavailable.ts'
import { watchTimers } from '../helpers/timing.ts'

// A run-store write is tried again while the store is unavailable (250 ms, then 500 ms, … at most
// 1 s apart), and not at all after any other failure.

t.test('a write that succeeds is made once', async t => {
  let calls = 0
  t.equal(await whileUnavailable(async () => { calls++; return 'written' }), 'written')
  t.equal(calls, 1)
})

t.test('a write the store refused is tried again until it is written, after 250 ms, then 500 ms', async t => {
  // the retries' timers do not keep a process alive (a stopping sidecar does not wait for them): this test does
  const alive = setInterval(() => {}, 1000)
  t.teardown(() => { clearInterval(alive) })
  // the pauses the retries ask their timers for (what a loaded machine adds to them is not theirs)
  const asked: number[] = []
  const timers = watchTimers(t, ms => {
    if (ms > 0) asked.push(ms)
    return undefined
  })
  const at: number[] = []
  const result = await whileUnavailable(async () => {
    at.push(performance.now())
    if (at.length < 3) throw new RunStoreUnavailableError('down')
    return at.length
  })
  timers.restore()
  t.equal(result, 3, 'written at the third try')
  const gaps = [(at[1] as number) - (at[0] as number), (at[2] as number) - (at[1] as number)]
  t.ok(gaps[0] as number >= 245, `the first try again not before 250 ms (${Math.round(gaps[0] as number)})`)
  t.ok(gaps[1] as number >= 495, `the second not before 500 ms more (${Math.round(gaps[1] as number)})`)
  t.same(asked, [250, 500], 'the pauses: 250 ms, then 500 ms')
})

t.test('any other failure is not tried again', async t => {
  let calls = 0
  const bug = new TypeError('a bug')
  await t.rejects(whileUnavailable(async () => { calls++; throw bug }), bug)
  t.equal(calls, 1)
})
