import { nextAttempt, retriedRecord } from '../../run-record.ts'
import type { InterruptionReason, RunRecord } from '../../run-data.ts'
import { guard, type RedisContext, type ScopeKeys, scopeOfQueue } from './redis-context.ts'
import { RETRY } from './redis-queue-scripts.ts'

// An async run's attempts in Redis (docs/runs.md, "Running on interruptible capacity"): counted
// as it starts, and a run whose attempt was interrupted put back in the queue for its next one.

/**
 * How long a run put back is passed over by the sidecar that lost its attempt (TAKE's `avoid`):
 * another replica with a free slot takes it first (one idle waits on the wake list: at once).
 */
export const KEPT_FROM_LOSER_MS = 2000

/** Whether this store counts attempts (RUN_MAX_ATTEMPTS above 1). */
export const countsAttempts = (ctx: RedisContext): boolean => (ctx.settings.maxAttempts ?? 1) > 1

/** The attempt a record as stored names (its own `"attempt":`, before its interruptions'); undefined: none. */
export function attemptIn (record: string): number | undefined {
  const found = /"attempt":(\d+)/.exec(record)
  return found === null ? undefined : Number(found[1])
}

/** A run taken over, as it starts (START_READ): its attempt, the time its attempts before ran, and the number of its first event. */
export async function attemptTakenOver (ctx: RedisContext, keys: ScopeKeys, runId: string, queued: RunRecord): Promise<{ attempt: number, ranMs: number, firstEvent: number }> {
  const [ranMs, events] = await guard(ctx.redis.hmget(keys.run(runId), 'ran_ms', 'events'))
  return { attempt: nextAttempt(queued), ranMs: Number(ranMs ?? 0), firstEvent: Number(events ?? 0) }
}

/** A running run whose attempt was interrupted, to put back in the queue. */
export interface InterruptedAttempt {
  readonly keys: ScopeKeys
  readonly runId: string
  /** Its queue entry ('' none). */
  readonly entry: string
  /** Its record as stored (compare and set), and as read. */
  readonly raw: string
  readonly record: RunRecord
  readonly reason: InterruptionReason
  /** When it was interrupted (epoch ms). */
  readonly at: number
  /** The sidecar that lost it: it passes the run over for KEPT_FROM_LOSER_MS. */
  readonly lostBy: string
}

/**
 * The run queued again for its next attempt, in its place, with its retry event (RETRY); the
 * listener told. False when its record had changed (a cancel, an end, a takeover): nothing written.
 */
export async function retryAttempt (ctx: RedisContext, interrupted: InterruptedAttempt): Promise<boolean> {
  const { keys, runId, record, reason, at } = interrupted
  const queued = retriedRecord(record, reason, at)
  const attempt = queued.attempt ?? 1
  const startedAt = record.started_at === undefined ? at : Date.parse(record.started_at)
  const n = await guard(RETRY.call(ctx.redis, {
    run: keys.run(runId), queue: keys.queue, turns: keys.turns, fair: keys.fair, wake: keys.wake, queuedBytes: keys.queuedBytes,
    dueSet: keys.expiry, index: keys.runs, events: keys.events(runId),
    oldRecord: interrupted.raw, newRecord: JSON.stringify(queued), entry: interrupted.entry, runId, ranMs: Math.max(0, Math.round(at - startedAt)),
    avoid: `${interrupted.lostBy} ${at + KEPT_FROM_LOSER_MS}`, event: JSON.stringify({ attempt: attempt + 1, reason }), liveChannel: keys.live(runId)
  }))
  if (n === undefined) return false
  ctx.lease.held.delete(interrupted.entry)
  ctx.known.delete(interrupted.entry)
  ctx.listener?.retried?.(scopeOfQueue(keys.queue), runId, reason, attempt)
  return true
}
