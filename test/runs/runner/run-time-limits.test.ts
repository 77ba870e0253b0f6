import { performance } from 'node:perf_hooks'
import { setTimeout as delay } from 'node:timers/promises'
import t from 'tap'
import { DeadlineExceededError, RunDeadlinePassedError, type SidecarError } from '../../../src/errors.ts'
import type { TakenRun } from '../../../src/runs/run-data.ts'
import { armRunDeadline, expiredAtStart } from '../../../src/runs/runner/run-time-limits.ts'
import { patient } from '../../helpers/timing.ts'
import { memoryStore, newRun, takenRun, within, type RunInput } from './runner-kit.ts'

// A run's time limits alone: whether a run taken late still goes to the app (expiredAtStart), and
// the timer that cuts a running one (armRunDeadline). The runs are as the memory queue hands them out.

const run = (input: Omit<RunInput, 'runId'> & { cancelAfter?: string }): TakenRun => ({
  ...newRun({ runId: 'r', ...input, headers: input.cancelAfter === undefined ? [] : ['Cancel-After', input.cancelAfter] }),
  entry: ''
})

/** The reason `armRunDeadline` cut with, and when (ms after arming; `at`: epoch ms), bounded. */
async function cutOf (taken: TakenRun, deadlineSeconds: number): Promise<{ reason: SidecarError, afterMs: number, at: number }> {
  const armedAt = performance.now()
  let cuts = 0
  const reason = await within(new Promise<SidecarError>(resolve => {
    const timer = armRunDeadline(taken, deadlineSeconds, why => { cuts++; resolve(why) })
    if (timer === undefined) throw new Error('no timer armed')
  }), 'the cut')
  const afterMs = performance.now() - armedAt
  const at = Date.now()
  await delay(20)
  if (cuts !== 1) throw new Error(`cut ${cuts} times`)
  return { reason, afterMs, at }
}

t.test('expiredAtStart: a run within its limits goes to the app', async t => {
  const store = await memoryStore(t)
  const taken = await takenRun(store, { runId: 'fresh', headers: ['cancel-after', '1h'] })
  t.equal(expiredAtStart(taken, 60), undefined)
  t.equal(expiredAtStart(run({ createdAt: Date.now() - 59_000 }), 60), undefined, 'a second before its queue TTL')
  t.equal(expiredAtStart(run({ createdAt: Date.now() - 5000, cancelAfter: 'not a limit' }), 60), undefined, 'a stored Cancel-After that no longer parses sets no limit')
})

t.test('expiredAtStart: past ASYNC_QUEUE_TTL_SECONDS it fails 504 "expired in the queue", never timed at the app', async t => {
  const before = Date.now()
  const outcome = expiredAtStart(run({ createdAt: before - 60_000 }), 60)
  t.same(outcome, {
    status: 'failed', statusCode: 504, resultJson: '{"message":"expired in the queue"}', runTimeMs: 0, error: 'expired in the queue', completedAt: outcome?.completedAt
  })
  t.ok((outcome?.completedAt ?? 0) >= before && (outcome?.completedAt ?? 0) <= Date.now(), 'completed now')
  t.equal(expiredAtStart(run({ createdAt: Date.now() - 61_000, cancelAfter: '2m' }), 60)?.error, 'expired in the queue', 'a later Cancel-After does not save it')
})

t.test('expiredAtStart: a Cancel-After that passed first fails it 504 "deadline passed"; at a tie too', async t => {
  const cases = [
    [run({ createdAt: Date.now() - 2000, cancelAfter: '1' }), 60, 'Cancel-After passed, the TTL not'],
    [run({ createdAt: Date.now() - 5000, cancelAfter: '1s' }), 2, 'both passed: Cancel-After first'],
    [run({ createdAt: Date.now() - 120_000, cancelAfter: '1m' }), 60, 'both at the same instant']
  ] as const
  for (const [taken, ttl, why] of cases) {
    const outcome = expiredAtStart(taken, ttl)
    t.same(outcome, {
      status: 'failed', statusCode: 504, resultJson: '{"message":"deadline passed"}', runTimeMs: 0, error: 'deadline passed', completedAt: outcome?.completedAt
    }, why)
  }
})

t.test('armRunDeadline: no DEADLINE_SECONDS and no Cancel-After arms nothing', async t => {
  t.equal(armRunDeadline(run({}), 0, () => { t.fail('cut') }), undefined)
  t.equal(armRunDeadline(run({ cancelAfter: 'x1' }), 0, () => { t.fail('cut') }), undefined, 'nor a Cancel-After that no longer parses')
})

t.test('armRunDeadline: DEADLINE_SECONDS from now cuts with its 504', async t => {
  const { reason, afterMs } = await cutOf(run({ createdAt: Date.now() - 10_000 }), 0.1)
  t.ok(reason instanceof DeadlineExceededError)
  t.equal(reason.status, 504)
  t.equal(reason.message, 'request exceeded its deadline of 0.1s')
  t.ok(afterMs >= 95, `cut ${afterMs.toFixed(0)} ms after its start, not at once for its submission 10 s ago`)
  // the 0.1 s deadline as seconds, not a unit slip 10x or more too long: a ceiling far past a busy machine's delay
  t.ok(afterMs < patient(1000), `cut ${afterMs.toFixed(0)} ms after arming, not a deadline counted in the wrong unit`)
  const later = await cutOf(run({ cancelAfter: '1h' }), 0.1)
  t.ok(later.reason instanceof DeadlineExceededError, 'sooner than a Cancel-After of an hour')
})

t.test('armRunDeadline: a Cancel-After sooner than DEADLINE_SECONDS, counted from the submission, cuts with "deadline passed"', async t => {
  const createdAt = Date.now() - 1850
  const { reason, afterMs, at } = await cutOf(run({ createdAt, cancelAfter: '2s' }), 30)
  t.ok(reason instanceof RunDeadlinePassedError)
  t.equal(reason.status, 504)
  t.equal(reason.message, 'deadline passed')
  t.ok(at - createdAt >= 1999, `cut ${at - createdAt} ms after its submission`)
  // due ~150 ms after arming; DEADLINE_SECONDS (30 s) is far past the scaled bound
  t.ok(afterMs < patient(1000), `${afterMs.toFixed(0)} ms after arming, not DEADLINE_SECONDS (30 s)`)
  const noDeadline = await cutOf(run({ createdAt: Date.now() - 950, cancelAfter: '1' }), 0)
  t.ok(noDeadline.reason instanceof RunDeadlinePassedError, 'without DEADLINE_SECONDS')
})

t.test('armRunDeadline: a Cancel-After already past cuts at once', async t => {
  const { reason, afterMs } = await cutOf(run({ createdAt: Date.now() - 5000, cancelAfter: '1' }), 30)
  t.ok(reason instanceof RunDeadlinePassedError)
  // due at once; DEADLINE_SECONDS (30 s) is far past the scaled bound
  t.ok(afterMs < patient(500), `cut after ${afterMs.toFixed(0)} ms, not at DEADLINE_SECONDS (30 s)`)
})

t.test('armRunDeadline: a cleared timer never cuts; a year-long Cancel-After is armed', async t => {
  let cuts = 0
  const timer = armRunDeadline(run({}), 0.05, () => { cuts++ })
  timer?.clear()
  await delay(100) // past when it would have fired: only time passing shows it did not
  t.equal(cuts, 0)
  const year = armRunDeadline(run({ cancelAfter: '8760h' }), 0, () => { cuts++ })
  t.ok(year !== undefined, 'armed past setTimeout\'s 24.8 days')
  year?.clear()
  t.equal(cuts, 0)
})
