import { finishedRecord, isFinished, REPLICA_LOST } from '../../run-record.ts'
import type { RunView, TakenRun } from '../../run-data.ts'
import { retryAttempt } from './redis-attempts.ts'
import { guard, type RedisContext, ScopeKeys, scopeOfQueue, parseWebhook } from './redis-context.ts'
import type { RedisDeliveries } from './redis-deliveries.ts'
import type { RedisQueue } from './redis-queue.ts'
import { GROUP } from './redis-queue-scripts.ts'
import { failLostClaim } from './redis-key-claims.ts'
import { FORGET_CONSUMERS, KEEP_HELD, RENEW_CLAIMS, SENDERS } from './redis-scripts.ts'
import { LEASE_BEAT, LOST_CLAIMS } from './redis-due-scripts.ts'
import { GONE, LEASE, LEFT } from './redis-due.ts'

/** A consumer idle this many times RUN_LOST_AFTER_SECONDS, holding nothing, belonged to a sidecar long gone (a live one touches its groups every heartbeat). */
const GONE_AFTER_LOST = 2
/** How long after a beat's worth of time the second takeover of a lost sidecar's entries looks (their idle time is counted by Redis). */
const LATER_TAKEOVER_MARGIN_MS = 500

/** Removes from the app's queue and deliveries groups the consumer named ('' any idle over `idleMs`) that holds nothing. */
export async function forgetConsumers (ctx: RedisContext, consumer: string, idleMs: number): Promise<void> {
  for (const [stream, group] of [[ctx.own.queue, GROUP], [ctx.own.deliveries, SENDERS]] as const) {
    await FORGET_CONSUMERS.call(ctx.redis, { stream, group, consumer, idleMs })
  }
}

/** The consumer group of a stream this store holds entries of: an app's queue (runs) or its deliveries. */
const groupOf = (stream: string): string => stream.endsWith(':deliveries') ? SENDERS : GROUP

/**
 * The Redis store's heartbeat and reaper. While this sidecar holds anything (redis-lease.ts), its
 * heartbeat refreshes its claim (XCLAIM … JUSTID) on every entry it holds, renews its
 * Idempotency-Key claims and moves its lease in the app's due set (`lease:<consumer>`, the time by
 * which it must beat again). When a lease falls due (redis-due.ts: its sidecar is lost, or paused)
 * the reaper takes over the entries of lost sidecars (XAUTOCLAIM): a run that had not started runs
 * here, one that had is queued again for its next attempt when it has one left (RUN_MAX_ATTEMPTS),
 * else failed with "replica lost", a delivery gets its remaining attempts here; a
 * lost sidecar's keyed sync runs fail "replica lost". An idle sidecar sends none of this.
 */
export class RedisReaper {
  readonly #ctx: RedisContext
  readonly #queue: RedisQueue
  readonly #deliveries: RedisDeliveries

  constructor (ctx: RedisContext, queue: RedisQueue, deliveries: RedisDeliveries) {
    this.#ctx = ctx
    this.#queue = queue
    this.#deliveries = deliveries
  }

  /** This sidecar's lease member in the app's due set. */
  get #lease (): string { return `${LEASE}${this.#ctx.consumer}` }

  /** A beat: refreshes what is held, and the lease's time (by the next beat, and RUN_LOST_AFTER_SECONDS after it). */
  async keep (): Promise<void> {
    const ctx = this.#ctx
    if (!ctx.available || ctx.closed) return
    try {
      // fencing: what another sidecar took over while this one was silent (a pause) is no longer
      // held here. Each stream's entries as held when its refresh is sent: one left meanwhile (a
      // delivery handed on) is not refreshed after it was left.
      for (const stream of new Set(ctx.lease.held.values())) {
        const ids = [...ctx.lease.held].filter(([, held]) => held === stream).map(([id]) => id)
        if (ids.length === 0) continue
        const lost = await KEEP_HELD.call(ctx.redis, { stream, group: groupOf(stream), consumer: ctx.consumer, ids })
        for (const id of lost) ctx.lease.held.delete(id)
      }
      if (ctx.lease.claims.size > 0) {
        const lost = await RENEW_CLAIMS.call(ctx.redis, {
          claims: ctx.own.claims, slots: [...ctx.lease.claims.keys()], runIds: [...ctx.lease.claims.values()], leaseMs: ctx.claimLeaseMs
        })
        for (const key of lost) ctx.lease.claims.delete(key)
      }
      // after the refreshes: when the lease falls due, what it held is idle that long
      await guard(LEASE_BEAT.call(ctx.redis, { dueSet: ctx.own.expiry, member: this.#lease, lostAfterMs: ctx.lostAfterMs }))
    } catch {} // Redis went away meanwhile: the next beat tries again
  }

  /**
   * Takes over what lost sidecars held: entries idle past RUN_LOST_AFTER_SECONDS (runs, deliveries)
   * and keyed sync runs' claims not renewed as long. When a lease falls due, and once as the store
   * first answers (a sidecar that died before its lease was written, or one of a version without leases).
   */
  async takeOver (): Promise<void> {
    const ctx = this.#ctx
    if (!ctx.available || ctx.closed) return
    // keyed sync runs of lost sidecars: ended "replica lost", their keys answering so
    const lostClaims = await LOST_CLAIMS.call(ctx.redis, { claims: ctx.own.claims, lostAfterMs: ctx.lostAfterMs })
    for (const { slot, runId } of lostClaims) await failLostClaim(ctx, ctx.own, slot, runId)
    await this.#reap(ctx.own.queue)
    await this.#deliveries.reap(ctx.own)
  }

  /** The safety sweep: what lost sidecars left that no lease covers, and the consumers of sidecars long gone. */
  async sweep (): Promise<void> {
    await this.takeOver()
    if (this.#ctx.available && !this.#ctx.closed) await forgetConsumers(this.#ctx, '', GONE_AFTER_LOST * this.#ctx.lostAfterMs)
  }

  /**
   * The first beat, as this sidecar starts holding something: its lease is written at once, before
   * anything else (what it just took is idle from before, so when the lease falls due it is idle that long).
   */
  async first (): Promise<void> {
    const ctx = this.#ctx
    await guard(LEASE_BEAT.call(ctx.redis, { dueSet: ctx.own.expiry, member: this.#lease, lostAfterMs: ctx.lostAfterMs }))
  }

  /** Nothing held any more: the lease leaves the due set (the heartbeat stops). */
  async release (): Promise<void> {
    await guard(this.#ctx.redis.zrem(this.#ctx.own.expiry, this.#lease))
  }

  /**
   * Leases fell due: their sidecars' entries and claims are taken over (and this one's own pending
   * entries looked at); each lost lease becomes a `gone:` member, due when its consumer may be
   * removed from the app's groups (idle GONE_AFTER_LOST × RUN_LOST_AFTER_SECONDS), which that one's
   * turn does.
   */
  async reap (members: readonly string[]): Promise<void> {
    const ctx = this.#ctx
    if (!ctx.available || ctx.closed) return
    const lost = members.filter(member => member.startsWith(LEASE) && member !== this.#lease)
    const left = members.filter(member => member.startsWith(LEFT))
    const gone = members.filter(member => member.startsWith(GONE))
    // this sidecar's own lease fell due (a pause, or a release that failed): moved on, or removed
    if (members.includes(this.#lease)) await (ctx.lease.holds ? this.keep() : this.release())
    if (lost.length > 0 || left.length > 0) await this.takeOver()
    // what a lost sidecar took after its last beat is idle less than RUN_LOST_AFTER_SECONDS when
    // its lease falls due (the lease was written at that beat): one more takeover a beat later
    // finds it idle long enough, rather than the sweep minutes later
    if (lost.length > 0) setTimeout(() => { void this.takeOver().catch(() => {}) }, ctx.heartbeatMs + LATER_TAKEOVER_MARGIN_MS).unref()
    // a stopping sidecar takes no delivery over: left ones stay due, for another
    if (left.length > 0 && !this.#deliveries.leaving) await guard(ctx.redis.zrem(ctx.own.expiry, ...left))
    if (lost.length > 0) {
      const later = Date.now() + GONE_AFTER_LOST * ctx.lostAfterMs
      const moves: Array<string | number> = []
      for (const member of lost) moves.push(later, `${GONE}${member.slice(LEASE.length)}`)
      await guard(ctx.redis.zadd(ctx.own.expiry, ...moves))
      await guard(ctx.redis.zrem(ctx.own.expiry, ...lost))
    }
    if (gone.length > 0) {
      // consumers of sidecars long gone, their entries taken over: removed from the app's groups
      await forgetConsumers(ctx, '', GONE_AFTER_LOST * ctx.lostAfterMs)
      await guard(ctx.redis.zrem(ctx.own.expiry, ...gone))
    }
  }

  /**
   * Entries pending for this sidecar that it does not hold (idle past a heartbeat: no take is
   * on them right now), looked at a heartbeat after a reconnect or a take whose answer was lost:
   * - an end it wrote lately whose entry is still pending: the primary that acknowledged the end
   *   lost its place before its replica had it. Written again, unless the run ended otherwise
   *   meanwhile (without this, the run would stay running, then fail "replica lost");
   * - an entry a take handed it whose answer never came (a timeout, a cut connection): taken
   *   here now, as a lost sidecar's would be (without this, it would wait RUN_LOST_AFTER_SECONDS).
   */
  async ownPending (): Promise<void> {
    const ctx = this.#ctx
    if (!ctx.available || ctx.closed) return
    ctx.lease.ended.purgeStale()
    if (ctx.lease.ended.size === 0 && !ctx.lease.takeCut) return
    ctx.lease.takeCut = false
    const queue = ctx.own.queue
    const pending = await ctx.redis.xpending(queue, GROUP, 'IDLE', ctx.heartbeatMs, '-', '+', 100, ctx.consumer) as Array<[string, ...unknown[]]>
    for (const [entry] of pending) {
      if (ctx.lease.held.has(entry)) continue
      const ended = ctx.lease.ended.get(entry)
      if (ended === undefined) {
        const [found] = await ctx.redis.xrange(queue, entry, entry)
        const runId = found?.[1][1]
        if (runId !== undefined) await this.#queue.reclaim({ queue, id: entry, runId })
        continue
      }
      ctx.lease.ended.delete(entry)
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
      const [view, raw, , owner] = await ctx.readOrMissing(keys, runId)
      if (view?.record.status === 'queued') {
        await this.#queue.reclaim({ queue, id, runId })
      } else if (view?.record.status === 'running') {
        if (!await this.#retryLost(keys, runId, id, view, raw, owner)) await this.#failLost(keys, runId, id, view, raw, owner)
      } else {
        await ctx.forget(keys, id)
      }
    }
  }

  /**
   * A run whose sidecar was lost mid-attempt, with attempts left (RUN_MAX_ATTEMPTS): queued again
   * for its next attempt, kept a moment from the lost sidecar (should it come back). False when it
   * has none left, or its record changed meanwhile.
   */
  async #retryLost (keys: ScopeKeys, runId: string, entry: string, view: RunView, raw: string, owner: string): Promise<boolean> {
    const { attempt } = view.record
    if (attempt === undefined || attempt >= (this.#ctx.settings.maxAttempts ?? 1)) return false
    const record = JSON.parse(raw) as RunView['record']
    return await retryAttempt(this.#ctx, { keys, runId, entry, raw, record, reason: 'replica lost', at: Date.now(), lostBy: owner })
  }

  /** A run whose sidecar was lost mid-run, with no attempt left: failed, never run again; this sidecar sends its webhook. */
  async #failLost (keys: ScopeKeys, runId: string, entry: string, view: RunView, raw: string, owner: string): Promise<void> {
    const now = Date.now()
    const startedAt = view.record.started_at === undefined ? now : Date.parse(view.record.started_at)
    const resultJson = JSON.stringify({ message: REPLICA_LOST.message })
    const record = finishedRecord(view.record, {
      status: 'failed', statusCode: REPLICA_LOST.statusCode, resultJson, runTimeMs: now - startedAt, error: REPLICA_LOST.message, completedAt: now, interrupted: 'replica lost'
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
    this.#ctx.listener?.lost(run, { record, resultJson, async: view.async, ...(owner === '' ? {} : { ranBy: owner }) })
  }
}
