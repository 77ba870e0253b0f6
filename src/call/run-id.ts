import { randomUUID } from 'node:crypto'
import { isRunId } from '../shared/run-id-rule.ts'

/** The caller's `X-Request-Id` when it is safe to reuse (no `.`, bounded), else a new UUID. */
export function runIdFor (callerRequestId: string | string[] | undefined): string {
  return isRunId(callerRequestId) ? callerRequestId : randomUUID()
}
