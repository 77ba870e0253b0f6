import { DeadlineExceededError } from '../../errors.ts'
import type { CallRecord } from './call-record.ts'

/**
 * The deadline stage (504): past DEADLINE_SECONDS the call is aborted. A wait for a slot gives
 * up; a forwarded call's relay cuts the app request (504, or an error event on a stream); any
 * other stage is answered 504 at once. 0: no deadline.
 */
export function startDeadline (call: CallRecord, seconds: number): void {
  if (seconds === 0) return
  const timer = setTimeout(expire, seconds * 1000, call, seconds)
  call.onClose(() => { clearTimeout(timer) })
}

function expire (call: CallRecord, seconds: number): void {
  const error = new DeadlineExceededError(seconds)
  call.abort(error)
  if (!call.forwarded) call.answer(error)
}
