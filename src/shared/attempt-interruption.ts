import { ReplicaStoppedError, SidecarError } from '../errors.ts'
import type { InterruptionReason } from './metric-contracts.ts'

/**
 * Why an attempt's app request was interrupted (docs/runs.md, "Running on interruptible
 * capacity"): the grace period's end cut it (`cut`), or the app's connection failed before its
 * response began; undefined for anything else (an answer, a deadline, a cancel, a body too large).
 * The one rule of both relays: a call gone on as a run, and a queued run's attempt.
 */
export function attemptInterruption (cut: Error | undefined, answered: boolean, cause: Error): InterruptionReason | undefined {
  if (cut !== undefined) return cut instanceof ReplicaStoppedError ? 'replica stopped' : undefined
  return !answered && !(cause instanceof SidecarError) ? 'app unreachable' : undefined
}
