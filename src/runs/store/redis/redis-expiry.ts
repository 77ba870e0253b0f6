import { DEFAULT_QUEUE_TTL_SECONDS, expiryError, queuedExpiry } from '../../run-expiry.ts'
import { expiredRecord } from '../../run-record.ts'
import type { RunRecord, TakenRun } from '../../run-data.ts'
import { guard, parseWebhook, type RedisContext } from './redis-context.ts'

/**
 * Fails the app's queued runs whose time limit passed (`Cancel-After`, ASYNC_QUEUE_TTL_SECONDS),
 * whether or not a slot frees: a sooner `Cancel-After` puts a run in the app's due set (SUBMIT; its
 * start or end takes it out), the TTL is found from the queued index's oldest runs (redis-due.ts),
 * and a sidecar that finds one due fails it (the compare-and-set of the record lets one sidecar do so). Its webhook is then this sidecar's to send (listener.expired), written down
 * before its first attempt like any delivery; a sidecar that dies between the two loses that one webhook.
 */
export class RedisExpiry {
  readonly #ctx: RedisContext

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
  }

  /** The runs due: each failed if still queued and past its limit (as this sidecar counts it). */
  async expire (runIds: readonly string[]): Promise<void> {
    for (const runId of runIds) await this.#expire(runId)
  }

  async #expire (runId: string): Promise<void> {
    const ctx = this.#ctx
    const keys = ctx.own
    const [raw, request, webhook, entry] = await guard(ctx.redis.hmget(keys.run(runId), 'record', 'request', 'webhook', 'entry'))
    const record = raw === null || raw === undefined ? undefined : JSON.parse(raw) as RunRecord
    if (record === undefined || record.status !== 'queued') {
      await guard(ctx.redis.zrem(keys.expiry, runId)) // gone, or it left the queue without leaving the set
      return
    }
    const stored = request === null || request === undefined ? undefined : JSON.parse(request) as { method: string, path: string, headers: string[] }
    const createdAt = Date.parse(record.created_at)
    const submitted = { createdAt, request: { method: stored?.method ?? '', path: stored?.path ?? '', headers: stored?.headers ?? [], body: null } }
    const now = Date.now()
    const limit = queuedExpiry(submitted, ctx.settings.queueTtlSeconds ?? DEFAULT_QUEUE_TTL_SECONDS)
    if (limit.at > now) {
      await guard(ctx.redis.zadd(keys.expiry, limit.at, runId)) // a sidecar with another ASYNC_QUEUE_TTL_SECONDS set it: this one's stands here
      return
    }
    const expired = expiredRecord(record, now, expiryError(limit))
    if (!await ctx.transition(keys, runId, raw as string, expired.record, { result: expired.resultJson, entry: entry ?? '', done: true })) return
    const run: TakenRun = {
      ...submitted, scope: ctx.settings.scope, runId, entry: '', webhook: webhook === null || webhook === undefined ? undefined : parseWebhook(webhook)
    }
    ctx.listener?.expired(run, { record: expired.record, resultJson: expired.resultJson, async: true })
  }
}
