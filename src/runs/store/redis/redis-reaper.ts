import { finishedRecord, isFinished, REPLICA_LOST } from '../../run-record.ts'
import type { RunView, TakenRun } from '../../run-data.ts'
import { type RedisContext, ScopeKeys, scopeOfQueue, parseWebhook } from './redis-context.ts'
import type { RedisDeliveries } from './redis-deliveries.ts'
import type { RedisQueue } from './redis-queue.ts'
import { GROUP } from './redis-queue-scripts.ts'
import { failLostClaim } from './redis-key-claims.ts'
import { FORGET_CONSUMERS, KEEP_HELD, LOST_CLAIMS, RENEW_CLAIMS, SENDERS } from './redis-scripts.ts'

/** A consumer idle this many times RUN_LOST_AFTER_SECONDS, holding nothing, belonged to a sidecar long gone (a live one touches its groups every heartbeat). */
const GONE_AFTER_LOST = 2

/** Removes from the app's queue and deliveries groups the consumer named ('' any idle over `idleMs`) that holds nothing. */
export async function forgetConsumers (ctx: RedisContext, consumer: string, idleMs: number): Promise<void> {
  for (const [stream, group] of [[ctx.own.queue, GROUP], [ctx.own.deliveries, SENDERS]] as const) {
    await FORGET_CONSUMERS.run(ctx.redis, [stream], [group, consumer, idleMs])
  }
}

/** The consumer group of a stream this store holds entries of: an app's queue (runs) or its deliveries. */
const groupOf = (stream: string): string => stream.endsWith(':deliveries') ? SENDERS : GROUP

/**
 * The Redis store's heartbeat: it refreshes this sidecar's claim (XCLAIM … JUSTID) on every entry
 * it holds and renews its Idempotency-Key claims; then takes over the entries of lost sidecars
 * (XAUTOCLAIM): a run that had not started runs here, one that had is failed with "replica lost",
 * a delivery gets its remaining attempts here; a lost sidecar's keyed sync runs fail "replica lost".
 */
export class RedisReaper {
  readonly #ctx: RedisContext
  readonly #queue: RedisQueue
  readonly #deliveries: RedisDeliveries
  #beats = 0

  constructor (ctx: RedisContext, queue: RedisQueue, deliveries: RedisDeliveries) {
    this.#ctx = ctx
    this.#queue = queue
    this.#deliveries = deliveries
  }

  /** Heartbeat: refreshes the claim on every entry held; then takes over the entries of lost sidecars. */
  async keepAndReap (): Promise<void> {
    const ctx = this.#ctx
    if (!ctx.available || ctx.closed) return
    try {
      const byQueue = new Map<string, string[]>()
      for (const [id, queue] of ctx.held) {
        const ids = byQueue.get(queue)
        if (ids === undefined) byQueue.set(queue, [id])
        else ids.push(id)
      }
      // fencing: what another sidecar took over while this one was silent (a pause) is no longer held here
      for (const [stream, ids] of byQueue) {
        const lost = await KEEP_HELD.run(ctx.redis, [stream], [groupOf(stream), ctx.consumer, ...ids]) as string[]
        for (const id of lost) ctx.held.delete(id)
      }
      if (ctx.claims.size > 0) {
        const lost = await RENEW_CLAIMS.run(ctx.redis, [ctx.own.claims, ...ctx.claims.keys()], [...ctx.claims.values(), ctx.claimLeaseMs]) as string[]
        for (const key of lost) ctx.claims.delete(key)
      }
      // keyed sync runs of lost sidecars: ended "replica lost", their keys answering so
      const lostClaims = await LOST_CLAIMS.run(ctx.redis, [ctx.own.claims], [ctx.lostAfterMs]) as string[]
      for (let i = 0; i < lostClaims.length; i += 2) await failLostClaim(ctx, ctx.own, lostClaims[i] as string, lostClaims[i + 1] as string)
      await this.#ownPending()
      await this.#reap(ctx.own.queue)
      await this.#deliveries.reap(ctx.own)
      // consumers of sidecars long gone, their entries taken over above: removed from the app's
      // groups, once per lost window (they are gone after two; an idle sidecar's cost stays low)
      if (++this.#beats % Math.max(1, Math.round(ctx.lostAfterMs / ctx.heartbeatMs)) === 0) {
        await forgetConsumers(ctx, '', GONE_AFTER_LOST * ctx.lostAfterMs)
      }
    } catch {} // Redis went away meanwhile: the next beat tries again
  }

  /**
   * Entries pending for this sidecar that it does not hold (idle past a heartbeat: no take is
   * on them right now), after a failover or a cut connection:
   * - an end it wrote lately whose entry is still pending: the primary that acknowledged the end
   *   lost its place before its replica had it. Written again, unless the run ended otherwise
   *   meanwhile (without this, the run would stay running, then fail "replica lost");
   * - an entry a take handed it whose answer never came (a timeout, a cut connection): taken
   *   here now, as a lost sidecar's would be (without this, it would wait RUN_LOST_AFTER_SECONDS).
   */
  async #ownPending (): Promise<void> {
    const ctx = this.#ctx
    ctx.ended.purgeStale()
    if (ctx.ended.size === 0 && !ctx.takeCut) return
    ctx.takeCut = false
    const queue = ctx.own.queue
    const pending = await ctx.redis.xpending(queue, GROUP, 'IDLE', ctx.heartbeatMs, '-', '+', 100, ctx.consumer) as Array<[string, ...unknown[]]>
    for (const [entry] of pending) {
      if (ctx.held.has(entry)) continue
      const ended = ctx.ended.get(entry)
      if (ended === undefined) {
        const [found] = await ctx.redis.xrange(queue, entry, entry)
        const runId = found?.[1][1]
        if (runId !== undefined) await this.#queue.reclaim({ queue, id: entry, runId })
        continue
      }
      ctx.ended.delete(entry)
      const [view, raw, , owner] = await ctx.readOrMissing(ended.keys, ended.runId)
      if (view === undefined || isFinished(view.record) || (owner !== ctx.consumer && owner !== '')) {
        await ctx.forget(ended.keys, entry)
        continue
      }
      if (await ctx.transition(ended.keys, ended.runId, raw, ended.record, { result: ended.resultJson, entry, done: true, owner: ctx.consumer })) {
        ctx.listener?.rewritten?.(scopeOfQueue(ended.keys.queue), ended.runId, `its end (${ended.record.status})`)
      }
    }
  }

  async #reap (queue: string): Promise<void> {
    const ctx = this.#ctx
    const reply = await ctx.redis.call('XAUTOCLAIM', queue, GROUP, ctx.consumer, ctx.lostAfterMs, '0-0', 'COUNT', 100)
      .catch(() => undefined) as [string, Array<[string, string[] | null]>] | undefined
    if (reply === undefined) return
    const scope = scopeOfQueue(queue)
    const keys = new ScopeKeys(scope)
    for (const [id, fields] of reply[1]) {
      const runId = fields?.[1]
      if (runId === undefined) continue
      const [view, raw] = await ctx.readOrMissing(keys, runId)
      if (view?.record.status === 'queued') {
        await this.#queue.reclaim({ queue, id, runId })
      } else if (view?.record.status === 'running') {
        await this.#failLost(keys, runId, id, view, raw)
      } else {
        await ctx.forget(keys, id)
      }
    }
  }

  /** A run whose sidecar was lost mid-run: failed, never run again; this sidecar sends its webhook. */
  async #failLost (keys: ScopeKeys, runId: string, entry: string, view: RunView, raw: string): Promise<void> {
    const now = Date.now()
    const startedAt = view.record.started_at === undefined ? now : Date.parse(view.record.started_at)
    const resultJson = JSON.stringify({ message: REPLICA_LOST.message })
    const record = finishedRecord(view.record, {
      status: 'failed', statusCode: REPLICA_LOST.statusCode, resultJson, runTimeMs: now - startedAt, error: REPLICA_LOST.message, completedAt: now
    })
    const webhook = await this.#ctx.redis.hget(keys.run(runId), 'webhook')
    // the run's owner becomes this sidecar: the lost one, should it come back, writes no more events
    if (!await this.#ctx.transition(keys, runId, raw, record, { result: resultJson, entry, done: true, owner: this.#ctx.consumer })) return
    const run: TakenRun = {
      scope: scopeOfQueue(keys.queue),
      runId,
      entry: '',
      createdAt: Date.parse(view.record.created_at),
      webhook: webhook === null ? undefined : parseWebhook(webhook),
      request: { method: '', path: '', headers: [], body: null }
    }
    this.#ctx.listener?.lost(run, { record, resultJson, async: view.async })
  }
}
