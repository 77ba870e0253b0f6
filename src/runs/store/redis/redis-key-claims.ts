import { RunIdTakenError } from '../../../errors.ts'
import type { KeyClaims } from '../key-claims.ts'
import type { KeptAnswer, KeyClaim, KeyEntry, RunScope, TakenRun } from '../../run-data.ts'
import { guard, type RedisContext, ScopeKeys } from './redis-context.ts'
import { CLAIM_KEY, DROP_KEY, KEEP_ANSWER } from './redis-scripts.ts'

/** How long a recorded sync run's record outlives RUN_RETENTION_SECONDS while it runs (a day): a key's, or a call whose Prefer: wait ran out. */
export const RECORDED_RUN_GRACE_SECONDS = 86_400

/** Idempotency-Key slots in Redis: a claim still running is a lease the heartbeat renews. */
export class RedisKeyClaims implements KeyClaims {
  readonly #ctx: RedisContext

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
  }

  async claim (scope: RunScope, slot: string, claim: KeyClaim, run?: TakenRun): Promise<KeyEntry | undefined> {
    const ctx = this.#ctx
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    // a claim whose first request still runs holds a lease its sidecar renews: should the sidecar
    // die, the key is free again (a retry runs) once the lease runs out, not after RUN_RETENTION_SECONDS.
    // A sync run recorded with it is in no queue, so no other sidecar can tell its sidecar died:
    // should it, the record shows "running" until its TTL (its caller saw the connection drop)
    const held = await guard(CLAIM_KEY.run(ctx.redis, [key, keys.run(run?.runId ?? claim.runId), keys.runs], [
      claim.runId, claim.digest, claim.async ? '1' : '0', ctx.claimLeaseMs,
      run?.runningJson ?? '', ctx.consumer,
      run?.webhook === undefined ? '' : JSON.stringify(run.webhook), ctx.settings.retentionSeconds + RECORDED_RUN_GRACE_SECONDS, run?.createdAt ?? 0
    ])) as Array<Buffer | null> | null | number
    if (held === -1) throw new RunIdTakenError()
    if (held === null) {
      ctx.claims.set(key, claim.runId)
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
    const key = new ScopeKeys(scope).slot(slot)
    this.#ctx.claims.delete(key)
    await guard(KEEP_ANSWER.run(this.#ctx.redis, [key],
      [runId, answer.status, answer.contentType ?? '', answer.body, this.#ctx.settings.retentionSeconds * 1000]))
  }

  async drop (scope: RunScope, slot: string, runId: string, forgetRun = false): Promise<void> {
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    this.#ctx.claims.delete(key)
    await guard(DROP_KEY.run(this.#ctx.redis, [key, keys.run(runId)], [runId, forgetRun ? '1' : '0']))
  }
}
