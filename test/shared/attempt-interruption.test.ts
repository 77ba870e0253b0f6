import t from 'tap'
import { BodyTooLargeError, DeadlineExceededError, ReplicaStoppedError, RunCanceledError } from '../../src/errors.ts'
import { attemptInterruption } from '../../src/shared/attempt-interruption.ts'

// docs/runs.md, "Running on interruptible capacity": only these two interrupt an attempt; a run
// with attempts left then runs again. Everything else ends it.
t.test('the grace period\'s end interrupts an attempt, answered or not', async t => {
  t.equal(attemptInterruption(new ReplicaStoppedError(), false, new Error('socket closed')), 'replica stopped')
  t.equal(attemptInterruption(new ReplicaStoppedError(), true, new Error('socket closed')), 'replica stopped')
})

t.test('the app gone before its response began interrupts it; after, it does not', async t => {
  const reset = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })
  t.equal(attemptInterruption(undefined, false, reset), 'app unreachable')
  t.equal(attemptInterruption(undefined, true, reset), undefined, 'a response had begun')
})

t.test('a deadline, a cancel or the sidecar\'s own refusal is no interruption', async t => {
  t.equal(attemptInterruption(new DeadlineExceededError(2), false, new Error('aborted')), undefined)
  t.equal(attemptInterruption(new RunCanceledError(), false, new Error('aborted')), undefined)
  t.equal(attemptInterruption(undefined, false, new BodyTooLargeError(1024)), undefined, 'a refusal of ours, not the app gone')
})
