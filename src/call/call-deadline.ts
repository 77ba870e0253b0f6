import { performance } from 'node:perf_hooks'
import { DeadlineExceededError } from '../errors.ts'
import { cancelAfterSeconds } from '../shared/cancel-after.ts'
import { LONGEST_TIMER_MS, setLongTimeout } from '../shared/longest-timer.ts'
import type { CallRecord } from './call-record.ts'
import type { HttpCall } from './http-call.ts'

/**
 * The deadline stage (504): past DEADLINE_SECONDS the call is aborted. A wait for a slot gives
 * up; a forwarded call's relay cuts the app request (504, or an error event on a stream); any
 * other stage is answered 504 at once. 0: no deadline.
 */
export function startDeadline (call: CallRecord, seconds: number): void {
  if (seconds === 0) return
  armDeadline(call, seconds, seconds * 1000)
}

/**
 * The `Cancel-After` stage (400 malformed): a sync call's own deadline, counted from its arrival,
 * the smaller of it and DEADLINE_SECONDS applying (both are armed: the first to pass aborts). An
 * async run keeps the header with its request: its limit counts from its submission (run-expiry.ts).
 */
export function startCancelAfter (call: HttpCall, deadlineSeconds: number): void {
  const seconds = cancelAfterSeconds(call.req.headers['cancel-after'])
  if (seconds === undefined || call.async || (deadlineSeconds > 0 && deadlineSeconds <= seconds)) return
  armDeadline(call, seconds, Math.max(0, seconds * 1000 - (performance.now() - call.arrivedAt)))
}

function armDeadline (call: CallRecord, seconds: number, ms: number): void {
  // setTimeout directly for the common case (DEADLINE_SECONDS): one timer per call, no closure
  if (ms <= LONGEST_TIMER_MS) {
    const timer = setTimeout(expire, ms, call, seconds)
    call.onClose(() => { clearTimeout(timer) })
    return
  }
  const timer = setLongTimeout(() => { expire(call, seconds) }, ms)
  call.onClose(() => { timer.clear() })
}

function expire (call: CallRecord, seconds: number): void {
  const error = new DeadlineExceededError(seconds)
  call.abort(error)
  if (!call.forwarded) call.answer(error)
}
