import { DeadlineExceededError, RunDeadlinePassedError, type SidecarError } from '../../errors.ts'
import { expiryError, queuedExpiry, runDeadline } from '../run-expiry.ts'
import type { RunOutcome, TakenRun } from '../run-data.ts'
import { type LongTimer, setLongTimeout } from '../../shared/longest-timer.ts'

/**
 * A run whose time limit passed before its start could be written (taken just before the limit,
 * or its request read only with the start): it does not go to the app; it fails as it would have
 * in the queue. Undefined for a run within its limits.
 */
export function expiredAtStart (run: TakenRun, queueTtlSeconds: number): RunOutcome | undefined {
  const now = Date.now()
  const limit = queuedExpiry(run, queueTtlSeconds)
  if (limit.at > now) return undefined
  const error = expiryError(limit)
  return { status: 'failed', statusCode: error.status, resultJson: JSON.stringify({ message: error.message }), runTimeMs: 0, error: error.message, completedAt: now }
}

/**
 * Both time limits of a running run: DEADLINE_SECONDS from its start at the app, `Cancel-After`
 * from its submission; the sooner calls `cut` with its 504. Undefined when it has neither.
 */
export function armRunDeadline (run: TakenRun, deadlineSeconds: number, cut: (reason: SidecarError) => void): LongTimer | undefined {
  const cancelAt = runDeadline(run)
  const deadlineMs = deadlineSeconds > 0 ? deadlineSeconds * 1000 : Infinity
  const cancelMs = cancelAt === undefined ? Infinity : Math.max(0, cancelAt - Date.now())
  if (deadlineMs === Infinity && cancelMs === Infinity) return undefined
  const reason = cancelMs < deadlineMs ? new RunDeadlinePassedError() : new DeadlineExceededError(deadlineSeconds)
  return setLongTimeout(() => { cut(reason) }, Math.min(deadlineMs, cancelMs))
}
