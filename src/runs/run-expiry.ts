import { QueueExpiredError, RunDeadlinePassedError, type SidecarError } from '../errors.ts'
import { cancelAfterSeconds } from '../shared/cancel-after.ts'
import { storedHeader } from './stored-headers.ts'
import type { StoredRequest } from './run-data.ts'

/** ASYNC_QUEUE_TTL_SECONDS's default (one day). */
export const DEFAULT_QUEUE_TTL_SECONDS = 86_400

/** What a run's time limits are read from: its submission and its request (whose `Cancel-After` was checked then). */
interface Submitted {
  readonly createdAt: number
  readonly request: Pick<StoredRequest, 'headers'>
}

/** When a queued run fails if it has not started (epoch ms), and by which limit (`cancelAfter` true: its `Cancel-After`; false: ASYNC_QUEUE_TTL_SECONDS). */
export interface QueuedExpiry {
  readonly at: number
  readonly cancelAfter: boolean
}

/** The sooner of a queued run's `Cancel-After` and ASYNC_QUEUE_TTL_SECONDS, both from its submission. */
export function queuedExpiry (run: Submitted, ttlSeconds: number): QueuedExpiry {
  const ttlAt = run.createdAt + ttlSeconds * 1000
  const deadlineAt = runDeadline(run)
  return deadlineAt !== undefined && deadlineAt <= ttlAt ? { at: deadlineAt, cancelAfter: true } : { at: ttlAt, cancelAfter: false }
}

/** The error of a queued run failed by `limit`: made only when one fails (an Error takes its stack as it is made, a cost every run would pay). */
export function expiryError (limit: QueuedExpiry): SidecarError {
  return limit.cancelAfter ? new RunDeadlinePassedError() : new QueueExpiredError()
}

/** When a run's `Cancel-After` passes (epoch ms, from its submission), queued or running; undefined without one. */
export function runDeadline (run: Submitted): number | undefined {
  const seconds = storedCancelAfter(run.request.headers)
  return seconds === undefined ? undefined : run.createdAt + seconds * 1000
}

/** `Cancel-After` as a stored request carries it (checked when the run was submitted: a value that no longer parses sets no limit). */
function storedCancelAfter (headers: readonly string[]): number | undefined {
  try {
    return cancelAfterSeconds(storedHeader(headers, 'cancel-after'))
  } catch {
    return undefined
  }
}
