import { ReplicaStoppedError, RunCanceledError, type SidecarError } from '../errors.ts'
import type { InterruptionReason, NewRun, RunOutcome, RunRecord, RunView, TakenRun } from './run-data.ts'

/** The last time formatted (toISOString is dear, and calls come in bursts within one millisecond). */
let lastMs = Number.NaN
let lastIso = ''
function iso (epochMs: number): string {
  if (epochMs !== lastMs) {
    lastIso = new Date(epochMs).toISOString()
    lastMs = epochMs
  }
  return lastIso
}
const ms = (value: number): number => Math.round(value * 1000) / 1000

/**
 * A copy of the record, its fields in the order of docs/runs.md, "The record", and only the ones
 * that apply: records built alike share their hidden classes (faster than a spread of whatever
 * order a record came in).
 */
function recordOf (r: RunRecord): RunRecord {
  const copy: RunRecord = { run_id: r.run_id, status: r.status, created_at: r.created_at }
  if (r.started_at !== undefined) copy.started_at = r.started_at
  if (r.completed_at !== undefined) copy.completed_at = r.completed_at
  if (r.queue_time_ms !== undefined) copy.queue_time_ms = r.queue_time_ms
  if (r.run_time_ms !== undefined) copy.run_time_ms = r.run_time_ms
  if (r.status_code !== undefined) copy.status_code = r.status_code
  if (r.error !== undefined) copy.error = r.error
  if (r.attempt !== undefined) copy.attempt = r.attempt
  if (r.interruptions !== undefined) copy.interruptions = r.interruptions
  if (r.webhook !== undefined) copy.webhook = r.webhook
  return copy
}

/** The record of a run just submitted: queued. */
export function queuedRecord (run: NewRun): RunRecord {
  const record: RunRecord = { run_id: run.runId, status: 'queued', created_at: iso(run.createdAt) }
  if (run.webhook !== undefined) record.webhook = { status: 'pending', attempts: 0 }
  return record
}

/**
 * The record of a queued run as it starts. `attempt`: the attempt it starts (RUN_MAX_ATTEMPTS
 * above 1; undefined: the record's attempt stays as it is); `ranMs`: the time its attempts before
 * this one took, which is no wait (queue_time_ms counts every wait).
 */
export function startedRecord (record: RunRecord, createdAt: number, startedAt: number, attempt?: number, ranMs = 0): RunRecord {
  const started = recordOf(record)
  started.status = 'running'
  started.started_at = iso(startedAt)
  started.queue_time_ms = ms(startedAt - createdAt - ranMs)
  return attempt === undefined ? started : recordOf({ ...started, attempt })
}

/** The attempt a queued run starts: the one after its record's last (attempts counted: RUN_MAX_ATTEMPTS above 1). */
export const nextAttempt = (record: RunRecord): number => (record.attempt ?? 0) + 1

/** The record of a running run as it ends with `outcome`. */
export function finishedRecord (record: RunRecord, outcome: RunOutcome): RunRecord {
  const done = outcome.startedAt === undefined ? recordOf(record) : startedRecord(record, Date.parse(record.created_at), outcome.startedAt)
  done.status = outcome.status
  done.completed_at = iso(outcome.completedAt)
  done.run_time_ms = ms(outcome.runTimeMs)
  done.status_code = outcome.statusCode
  if (outcome.error !== undefined) done.error = { message: outcome.error }
  // the last attempt's interruption ends the run: the record says which attempt it was
  if (outcome.interrupted !== undefined && done.attempt !== undefined) return interrupted(done, outcome.interrupted, outcome.completedAt)
  return done
}

/** The record with its attempt interrupted at `at` (epoch ms) for `reason`, in its interruptions. */
function interrupted (record: RunRecord, reason: InterruptionReason, at: number): RunRecord {
  return recordOf({ ...record, interruptions: [...record.interruptions ?? [], { attempt: record.attempt ?? 1, reason, at: iso(at) }] })
}

/**
 * The record of a run whose attempt was interrupted at `at` (epoch ms), queued again for its
 * next attempt: queued as it was submitted, with its last attempt and its interruptions (no
 * started_at, queue_time_ms or run_time_ms until the next attempt starts).
 */
export function retriedRecord (record: RunRecord, reason: InterruptionReason, at: number): RunRecord {
  const queued: RunRecord = { run_id: record.run_id, status: 'queued', created_at: record.created_at, attempt: record.attempt ?? 1 }
  if (record.interruptions !== undefined) queued.interruptions = record.interruptions
  if (record.webhook !== undefined) queued.webhook = record.webhook
  return interrupted(queued, reason, at)
}

/** The record with its webhook's delivery state. */
export function withWebhook (record: RunRecord, webhook: NonNullable<RunRecord['webhook']>): RunRecord {
  const changed = recordOf(record)
  changed.webhook = webhook
  return changed
}

const CANCELED = new RunCanceledError()
/** The message of a canceled run (its error, and its webhook's result). */
export const CANCELED_MESSAGE = CANCELED.message
/** The status a canceled run's webhook reports. */
export const CANCELED_STATUS = CANCELED.status
export const CANCELED_RESULT = JSON.stringify({ message: CANCELED_MESSAGE })

/**
 * The record of a run canceled at `now`: a queued one never ran (no started_at, run_time_ms,
 * status_code or result); a running one ends with status 499 and `{"message": "run canceled"}`.
 * Returns the record and its result JSON.
 */
export function canceledRecord (record: RunRecord, now: number): { record: RunRecord, resultJson: string | undefined } {
  const canceled = recordOf(record)
  canceled.status = 'canceled'
  canceled.completed_at = iso(now)
  canceled.error = { message: CANCELED_MESSAGE }
  if (record.status !== 'running' || record.started_at === undefined) return { record: canceled, resultJson: undefined }
  canceled.run_time_ms = ms(now - Date.parse(record.started_at))
  canceled.status_code = CANCELED_STATUS
  return { record: canceled, resultJson: CANCELED_RESULT }
}

/**
 * The record of a queued run failed at `now` by a time limit (`Cancel-After`, ASYNC_QUEUE_TTL_SECONDS):
 * it never ran (no started_at, run_time_ms), its status_code and result are the error's (504).
 */
export function expiredRecord (record: RunRecord, now: number, error: SidecarError): { record: RunRecord, resultJson: string } {
  const failed = recordOf(record)
  failed.status = 'failed'
  failed.completed_at = iso(now)
  failed.status_code = error.status
  failed.error = { message: error.message }
  return { record: failed, resultJson: JSON.stringify({ message: error.message }) }
}

/**
 * A sync call with an Idempotency-Key, recorded as its key is claimed: running from `run.createdAt`
 * (its finish sets `started_at` to when the app request went out). The handle its events and end go through.
 */
export function recordedRun (run: NewRun): TakenRun {
  const { scope, runId, request, webhook, createdAt, sub } = run
  const running = startedRecord(queuedRecord(run), createdAt, createdAt)
  return { scope, runId, request, webhook, createdAt, sub, entry: '', running, runningJson: JSON.stringify(running) }
}

/**
 * Whether the run has moved past attempt `attempt` (undefined: attempts not counted, never): that
 * attempt was interrupted, and the run queued again or run again. Its late answer is not the run's.
 */
export function pastAttempt (record: RunRecord, attempt: number | undefined): boolean {
  if (attempt === undefined || record.attempt === undefined) return false
  return record.attempt !== attempt || record.interruptions?.some(interruption => interruption.attempt === attempt) === true
}

/** Whether a run has ended. */
export function isFinished (record: RunRecord): boolean {
  return record.status === 'succeeded' || record.status === 'failed' || record.status === 'canceled'
}

/** The failure of a running run whose sidecar died (docs/runs.md, "Where runs live": replica lost). */
export const REPLICA_LOST = { statusCode: 502, message: 'replica lost' } as const
const STOPPED = new ReplicaStoppedError()
/** The failure of a run cut by the end of its sidecar's grace period. */
export const REPLICA_STOPPED = { statusCode: STOPPED.status, message: STOPPED.message } as const

/**
 * The record as JSON, fields in the order of docs/runs.md, "The record", `result` spliced in as
 * kept (never parsed and re-serialised: a result may be megabytes).
 */
export function recordJson (view: RunView): string {
  const r = view.record
  let out = `{"run_id":${JSON.stringify(r.run_id)},"status":"${r.status}","created_at":"${r.created_at}"`
  if (r.started_at !== undefined) out += `,"started_at":"${r.started_at}"`
  if (r.completed_at !== undefined) out += `,"completed_at":"${r.completed_at}"`
  if (r.queue_time_ms !== undefined) out += `,"queue_time_ms":${r.queue_time_ms}`
  if (r.run_time_ms !== undefined) out += `,"run_time_ms":${r.run_time_ms}`
  if (r.status_code !== undefined) out += `,"status_code":${r.status_code}`
  if (view.resultJson !== undefined) out += `,"result":${view.resultJson}`
  if (r.error !== undefined) out += `,"error":${JSON.stringify(r.error)}`
  if (r.attempt !== undefined) out += `,"attempt":${r.attempt}`
  if (r.interruptions !== undefined) out += `,"interruptions":${JSON.stringify(r.interruptions)}`
  if (r.webhook !== undefined) out += `,"webhook":{"status":"${r.webhook.status}","attempts":${r.webhook.attempts}}`
  return out + '}'
}
