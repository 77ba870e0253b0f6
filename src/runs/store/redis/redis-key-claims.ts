import { RunIdTakenError } from '../../../errors.ts'
import type { KeyClaims } from '../key-claims.ts'
import { finishedRecord, REPLICA_LOST } from '../../run-record.ts'
import type { KeptAnswer, KeyClaim, KeyEntry, RunScope, TakenRun } from '../../run-data.ts'
import { guard, type RedisContext, ScopeKeys, parseWebhook } from './redis-context.ts'
import { CLAIM_KEY, DROP_KEY, FAIL_LOST_CLAIM, KEEP_ANSWER, type KeyClaimReply } from './redis-scripts.ts'

/** How long a recorded sync run's record outlives RUN_RETENTION_SECONDS while it runs (a day): a key's, or a call whose Prefer: wait ran out. */
export const RECORDED_RUN_GRACE_SECONDS = 86_400

/**
 * A keyed sync run whose sidecar is lost (no heartbeat for RUN_LOST_AFTER_SECONDS, by Redis's
 * clock): its run ends failed 502 "replica lost", owned by this sidecar, and the slot keeps that
 * answer for its retries (FAIL_LOST_CLAIM); the listener hears of it as of any lost run (counted,
 * its webhook sent). Nothing when the claim was renewed, answered or taken meanwhile.
 */
export async function failLostClaim (ctx: RedisContext, keys: ScopeKeys, slot: string, runId: string): Promise<void> {
  const [view, , , owner] = await ctx.readOrMissing(keys, runId)
  const now = Date.now()
  const resultJson = JSON.stringify({ message: REPLICA_LOST.message })
  const running = view?.record.status === 'running' ? view.record : undefined
  const record = running === undefined
    ? undefined
    : finishedRecord(running, {
      status: 'failed', statusCode: REPLICA_LOST.statusCode, resultJson, error: REPLICA_LOST.message, completedAt: now,
      runTimeMs: running.started_at === undefined ? 0 : now - Date.parse(running.started_at)
    })
  const failed = await guard(FAIL_LOST_CLAIM.call(ctx.redis, {
    claims: keys.claims, slot, run: keys.run(runId), events: keys.events(runId), index: keys.runs,
    runId, record: record === undefined ? '' : JSON.stringify(record), result: resultJson, ttlSeconds: ctx.settings.retentionSeconds,
    liveChannel: keys.live(runId), status: REPLICA_LOST.statusCode, contentType: 'application/json', body: resultJson,
    answerTtlMs: ctx.settings.retentionSeconds * 1000, lostAfterMs: ctx.lostAfterMs, owner: ctx.consumer, indexCutoffMs: ctx.indexCutoff()
  }))
  if (!failed || record === undefined || view === undefined) return
  const webhook = await guard(ctx.redis.hget(keys.run(runId), 'webhook'))
  ctx.listener?.lost({
    scope: ctx.settings.scope, runId, entry: '', createdAt: Date.parse(record.created_at),
    webhook: webhook === null ? undefined : parseWebhook(webhook), request: { method: '', path: '', headers: [], body: null }
  }, { record, resultJson, async: false, ...(owner === '' ? {} : { ranBy: owner }) })
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
    let held: KeyClaimReply
    for (let tries = 0; ; tries++) {
      held = await guard(CLAIM_KEY.call(ctx.redis, {
        claims: keys.claims, slot: key, run: keys.run(run?.runId ?? claim.runId), index: keys.runs,
        runId: claim.runId, digest: claim.digest, async: claim.async ? '1' : '0', leaseMs: ctx.claimLeaseMs,
        record: run?.runningJson ?? '', owner: ctx.consumer, webhook: run?.webhook === undefined ? '' : JSON.stringify(run.webhook),
        recordTtlSeconds: ctx.settings.retentionSeconds + RECORDED_RUN_GRACE_SECONDS, createdAtMs: run?.createdAt ?? 0, lostAfterMs: ctx.lostAfterMs, sub: run?.sub ?? ''
      }))
      if (held.kind !== 'lost' || tries === 2) break
      // the key's run is a lost sidecar's: ended "replica lost" first, and that is the answer this request replays
      await failLostClaim(ctx, keys, key, held.runId)
    }
    switch (held.kind) {
      case 'run id taken': throw new RunIdTakenError()
      case 'claimed':
        ctx.lease.claims.set(key, claim.runId)
        return undefined
      case 'held': return held.entry
      // still a lost sidecar's after three tries: no digest, so no request matches it (as before the typed reply)
      case 'lost': return { runId: held.runId, digest: '', async: false, answer: undefined }
    }
  }

  async keepAnswer (scope: RunScope, slot: string, runId: string, answer: KeptAnswer): Promise<void> {
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    this.#ctx.lease.claims.delete(key)
    await guard(KEEP_ANSWER.call(this.#ctx.redis, {
      slot: key, claims: keys.claims,
      runId, status: answer.status, contentType: answer.contentType ?? '', body: answer.body, ttlMs: this.#ctx.settings.retentionSeconds * 1000
    }))
  }

  async drop (scope: RunScope, slot: string, runId: string, forgetRun = false): Promise<void> {
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    this.#ctx.lease.claims.delete(key)
    await guard(DROP_KEY.call(this.#ctx.redis, { slot: key, run: keys.run(runId), claims: keys.claims, runId, forget: forgetRun ? '1' : '0' }))
  }
}
