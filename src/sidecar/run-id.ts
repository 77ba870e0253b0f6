import { randomUUID } from 'node:crypto'

const CALLER_RUN_ID = /^[A-Za-z0-9_-]{1,128}$/

/** The caller's `X-Request-Id` when it is safe to reuse (no `.`, bounded), else a new UUID. */
export function runIdFor (callerRequestId: string | string[] | undefined): string {
  return typeof callerRequestId === 'string' && CALLER_RUN_ID.test(callerRequestId)
    ? callerRequestId
    : randomUUID()
}
