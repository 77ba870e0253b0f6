import { RunIdTakenError } from '../../../errors.ts'
import type { KeyClaims } from '../key-claims.ts'
import { finishedRecord, REPLICA_LOST } from '../../run-record.ts'
import type { KeptAnswer, KeyClaim, KeyEntry, RunScope, TakenRun } from '../../run-data.ts'
import { guard, type RedisContext, ScopeKeys, parseWebhook } from './redis-context.ts'
import { CLAIM_KEY, DROP_KEY, FAIL_LOST_CLAIM, KEEP_ANSWER } from './redis-scripts.ts'

/** How long a recorded sync run's record outlives RUN_RETENTION_SECONDS while it runs (a day): a key's, or a call whose Prefer: wait ran out. */
export const RECORDED_RUN_GRACE_SECONDS = 86_400

/**
 * A keyed sync run whose sidecar is lost (no heartbeat for RUN_LOST_AFTER_SECONDS, by Redis's
 * clock): its run ends failed 502 "replica lost", owned by this sidecar, and the slot keeps that
 * answer for its retries (FAIL_LOST_CLAIM); the listener hears of it as of any lost run (counted,
 * its webhook sent). Nothing when the claim was renewed, answered or taken meanwhile.
 */
export async function failLostClaim (ctx: RedisContext, keys: ScopeKeys, slot: string, runId: string): Promise<void> {
  const [view] = await ctx.readOrMissing(keys, runId)
  const now = Date.now()
  const resultJson = JSON.stringify({ message: REPLICA_LOST.message })
  const running = view?.record.status === 'running' ? view.record : undefined
  const record = running === undefined
    ? undefined
    : finishedRecord(running, {
      status: 'failed', statusCode: REPLICA_LOST.statusCode, resultJson, error: REPLICA_LOST.message, completedAt: now,
      runTimeMs: running.started_at === undefined ? 0 : now - Date.parse(running.started_at)
    })
  const failed = await guard(FAIL_LOST_CLAIM.run(ctx.redis, [keys.claims, slot, keys.run(runId), keys.events(runId), keys.runs], [
    runId, record === undefined ? '' : JSON.stringify(record), resultJson, ctx.settings.retentionSeconds, keys.live(runId),
    REPLICA_LOST.statusCode, 'application/json', resultJson, ctx.settings.retentionSeconds * 1000, ctx.lostAfterMs, ctx.consumer, ctx.indexCutoff()
  ]))
  if (failed !== 1 || record === undefined || view === undefined) return
  const webhook = await guard(ctx.redis.hget(keys.run(runId), 'webhook'))
  ctx.listener?.lost({
    scope: ctx.settings.scope, runId, entry: '', createdAt: Date.parse(record.created_at),
    webhook: webhook === null ? undefined : parseWebhook(webhook), request: { method: '', path: '', headers: [], body: null }
  }, { record, resultJson, async: false })
}

/**
 * Idempotency-Key slots in Redis. A keyed sync run's claim is held until its answer is kept, its
 * sidecar's heartbeat renewing its time in the app's claims set: a sidecar lost or paused past
 * RUN_LOST_AFTER_SECONDS has its run ended "replica lost" (by a retry, or any heartbeat), never
 * a lapse that lets a retry run the request again. An async submit's claim is a lease.
 */
export class RedisKeyClaims implements KeyClaims {
  readonly #ctx: RedisContext

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
  }

  async claim (scope: RunScope, slot: string, claim: KeyClaim, run?: TakenRun): Promise<KeyEntry | undefined> {
    const ctx = this.#ctx
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    let held: Array<Buffer | null> | null | number
    for (let tries = 0; ; tries++) {
      held = await guard(CLAIM_KEY.run(ctx.redis, [keys.claims, key, keys.run(run?.runId ?? claim.runId), keys.runs], [
        claim.runId, claim.digest, claim.async ? '1' : '0', ctx.claimLeaseMs,
        run?.runningJson ?? '', ctx.consumer,
        run?.webhook === undefined ? '' : JSON.stringify(run.webhook), ctx.settings.retentionSeconds + RECORDED_RUN_GRACE_SECONDS, run?.createdAt ?? 0,
        ctx.lostAfterMs
      ])) as Array<Buffer | null> | null | number
      if (!Array.isArray(held) || held.length !== 2 || tries === 2) break
      // the key's run is a lost sidecar's: ended "replica lost" first, and that is the answer this request replays
      await failLostClaim(ctx, keys, key, String(held[1]))
    }
    if (held === -1) throw new RunIdTakenError()
    if (held === null) {
      ctx.lease.claims.set(key, claim.runId)
      return undefined
    }
    const [runId, digest, async, status, type, body] = held as Array<Buffer | null>
    return {
      runId: String(runId),
      digest: String(digest),
      async: String(async) === '1',
      answer: status === null || status === undefined
        ? undefined
        : { status: Number(String(status)), contentType: type === null || type === undefined || type.length === 0 ? undefined : String(type), body: body ?? Buffer.alloc(0) }
    }
  }

  async keepAnswer (scope: RunScope, slot: string, runId: string, answer: KeptAnswer): Promise<void> {
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    this.#ctx.lease.claims.delete(key)
    await guard(KEEP_ANSWER.run(this.#ctx.redis, [key, keys.claims],
      [runId, answer.status, answer.contentType ?? '', answer.body, this.#ctx.settings.retentionSeconds * 1000]))
  }

  async drop (scope: RunScope, slot: string, runId: string, forgetRun = false): Promise<void> {
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    this.#ctx.lease.claims.delete(key)
    await guard(DROP_KEY.run(this.#ctx.redis, [key, keys.run(runId), keys.claims], [runId, forgetRun ? '1' : '0']))
  }
}
