// The app's index of its recorded runs, one sorted set per status (`as:{project/app}:runs:<status>`),
// kept in the step that records or moves a run: lua/run-index.lua, which the scripts include.

/** Every status a run's record can have: one index each. */
export const RUN_STATUSES = ['queued', 'running', 'succeeded', 'failed', 'canceled'] as const

/** The RUN_RETENTION_SECONDS a finished run is kept, beyond the longest a run may wait and run first: members created before go from its status's index as runs end there. */
export function indexCutoff (retentionSeconds: number, queueTtlSeconds: number, now = Date.now()): number {
  return now - (retentionSeconds + queueTtlSeconds + 86_400) * 1000
}
