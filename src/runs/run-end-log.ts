import { hostname } from 'node:os'
import type { Logger } from 'pino'
import type { RunScope, RunView } from './run-data.ts'

/** This replica's name in run-end lines: HOSTNAME (a pod's name), else the machine's. */
export const thisReplica = (configured: string | undefined): string => configured ?? hostname()

/**
 * One line per finished recorded run (docs/operations.md, "Logs"), written by the sidecar that
 * recorded its end: its run id, status, `status_code`, attempt, the replica that ran it (`ranBy`:
 * the lost one, for a run another replica failed), and its queue and run times. Never its
 * request, result or webhook secret. A failed or canceled run is a warning, with its error.
 */
export function logRunEnd (logger: Logger, scope: RunScope, view: RunView, ranBy: string): void {
  const record = view.record
  const line: Record<string, unknown> = {
    runId: record.run_id,
    projectId: scope.projectId,
    appName: scope.appName,
    status: record.status,
    statusCode: record.status_code,
    attempt: record.attempt ?? 1,
    replica: ranBy,
    queueTimeMs: record.queue_time_ms,
    runTimeMs: record.run_time_ms
  }
  if (record.error !== undefined) line.error = record.error.message
  if (record.status === 'succeeded') logger.info(line, 'run finished')
  else logger.warn(line, 'run finished')
}
