import type { RunStoreAddress } from '../../../config/run-store-address.ts'
import type { RunStore, RunStoreListener } from '../run-store.ts'
import type { RunScope } from '../../run-data.ts'
import { RedisCallCancels } from './redis-call-cancels.ts'
import { RedisContext, type RedisRunStoreOptions, type RedisStoreSettings } from './redis-context.ts'
import { RedisDeliveries } from './redis-deliveries.ts'
import { LOOK_NOW, RedisDue } from './redis-due.ts'
import { RedisExpiry } from './redis-expiry.ts'
import { RedisKeyClaims } from './redis-key-claims.ts'
import { RedisListing } from './redis-listing.ts'
import { checkPersistence, type PersistenceWarn } from './redis-persistence.ts'
import { RedisQueue } from './redis-queue.ts'
import { forgetConsumers, RedisReaper } from './redis-reaper.ts'
import { RedisRecords } from './redis-records.ts'

/** Every how many liveness looks the sidecar also takes over what no lease covers. */
const SWEEP_TICKS = 10

/** How long a stop waits for Redis to take this sidecar out of its groups (a Redis gone: the others do it later). */
const LEAVE_WAIT_MS = 1000

export type { RedisRunStoreOptions, RedisStoreSettings } from './redis-context.ts'

/**
 * The run store in Redis (RUN_STORE_URL), shared by every sidecar given the same URL. Streams
 * with a consumer group queue the runs: a run handed to a sidecar stays in its pending list until
 * it ends, and the sidecar refreshes its claim (XCLAIM … JUSTID) as a heartbeat; a run whose
 * sidecar stops doing so is taken over by another (XAUTOCLAIM) and, if it had started, failed
 * with "replica lost". Records are hashes (compare-and-set by Lua script), events are streams,
 * followers and cancels hear of changes through pub/sub.
 */
export class RedisRunStore implements RunStore {
  readonly backend = 'redis'
  readonly queue: RedisQueue
  readonly records: RedisRecords
  readonly keys: RedisKeyClaims
  readonly listing: RedisListing
  readonly deliveries: RedisDeliveries
  readonly #ctx: RedisContext
  readonly #calls: RedisCallCancels
  readonly #reaper: RedisReaper
  readonly #due: RedisDue
  /** The liveness look at the app's due set, once every RUN_LOST_AFTER_SECONDS. */
  readonly #tick: NodeJS.Timeout
  /** The heartbeat, while this sidecar holds anything. */
  #beat: NodeJS.Timeout | undefined
  #ownCheck: NodeJS.Timeout | undefined
  #ownUntil = 0

  constructor (address: RunStoreAddress | string, settings: RedisStoreSettings, options: RedisRunStoreOptions = {}) {
    const ctx = new RedisContext(address, settings, options)
    this.#ctx = ctx
    this.queue = new RedisQueue(ctx)
    this.keys = new RedisKeyClaims(ctx)
    this.records = new RedisRecords(ctx, this.keys)
    this.queue.records = this.records
    this.listing = new RedisListing(ctx)
    this.deliveries = new RedisDeliveries(ctx)
    const reaper = new RedisReaper(ctx, this.queue, this.deliveries)
    const calls = new RedisCallCancels(ctx)
    this.#calls = calls
    // the app's cancel channel: an async run's cancel (its run id), or an ask for an in-flight call
    ctx.follow.onMessage(ctx.own.cancel, message => {
      if (message === LOOK_NOW) this.#due.schedule(Date.now())
      else if (!calls.heard(settings.scope, message)) ctx.listener?.canceled(settings.scope, message)
    })
    this.#reaper = reaper
    const expiry = new RedisExpiry(ctx)
    const due = new RedisDue(ctx, { runs: async runIds => { await expiry.expire(runIds) }, leases: async members => { await reaper.reap(members) } })
    this.#due = due
    ctx.dueAt = at => { due.schedule(at) }
    ctx.holding = () => { this.#startBeating() }
    ctx.checkOwn = () => { this.#checkOwnSoon() }
    // an idle sidecar's commands: one look at what falls due next, once per lost window, and a
    // takeover of what no lease covers every SWEEP_TICKS (entries of a sidecar that died before its
    // lease was written, or of a version without leases), with its consumers gone
    let ticks = 0
    this.#tick = setInterval(() => {
      void due.tick().catch(() => {})
      if (++ticks % SWEEP_TICKS === 0) void reaper.sweep().catch(() => {})
    }, ctx.lostAfterMs)
    this.#tick.unref()
    // as the store first answers: what lost sidecars left (one of a version without leases, one that
    // died before its lease was written), and the first look at what falls due
    let connected = false
    ctx.redis.on('ready', () => {
      void due.tick().catch(() => {})
      if (!connected) void reaper.takeOver().catch(() => {})
      // connected again (a failover, a restart): ends the primary lost are written again, and the
      // takes waiting ask at once
      else {
        this.#checkOwnSoon()
        this.queue.reconnected()
      }
      connected = true
    })
  }

  /**
   * This store's own pending entries looked at each heartbeat for a lost window from now (each is
   * idle a heartbeat by its look): ends a failover lost, written again (the primary may have
   * acknowledged them up to the switch, and the refreshes of their entries may have reached the new
   * one later); a run a lost answer's take left pending, taken here.
   */
  #checkOwnSoon (): void {
    if (this.#ctx.closed) return
    this.#ownUntil = Date.now() + this.#ctx.lostAfterMs + this.#ctx.heartbeatMs
    if (this.#ownCheck !== undefined) return
    const look = (): void => {
      this.#ownCheck = setTimeout(() => {
        void this.#reaper.ownPending().catch(() => {}).finally(() => {
          if (Date.now() < this.#ownUntil && !this.#ctx.closed) look()
          else this.#ownCheck = undefined
        })
      }, this.#ctx.heartbeatMs + 100)
      this.#ownCheck.unref()
    }
    look()
  }

  /** Something is held now: the heartbeat runs (its first beat at once: the lease is in the due set before anything could be lost), until nothing is. */
  #startBeating (): void {
    if (this.#beat !== undefined || this.#ctx.closed) return
    const reaper = this.#reaper
    void reaper.first().catch(() => {})
    this.#beat = setInterval(() => {
      if (this.#ctx.lease.holds) {
        void reaper.keep()
        return
      }
      clearInterval(this.#beat)
      this.#beat = undefined
      void reaper.release().catch(() => {})
    }, this.#ctx.heartbeatMs)
    this.#beat.unref()
  }

  get available (): boolean { return this.#ctx.available }

  /** Resolves once Redis is reachable, or after `ms` (the sidecar starts either way). */
  async reachable (ms: number): Promise<boolean> {
    if (this.#ctx.available) return true
    const { redis } = this.#ctx
    return await new Promise(resolve => {
      const timer = setTimeout(() => { redis.off('ready', ready); resolve(false) }, ms)
      const ready = (): void => { clearTimeout(timer); resolve(true) }
      redis.once('ready', ready)
    })
  }

  listen (listener: RunStoreListener): void { this.#ctx.listener = listener }

  /** A store serves one app: `_scope` is always its own (the route already refused any other). */
  async cancelCall (_scope: RunScope, runId: string, caller?: string): Promise<boolean> { return await this.#calls.cancel(runId, caller) }

  /** Once Redis first answers: a warn line for each setting that can lose runs (redis-persistence.ts). */
  async checkPersistence (warn: PersistenceWarn): Promise<void> { await checkPersistence(this.#ctx.redis, warn) }

  /** Stops; this sidecar leaves its app's consumer groups when it holds nothing there (what it holds, the others take over, then remove it). */
  async close (): Promise<void> {
    const ctx = this.#ctx
    if (ctx.closed) return
    clearInterval(this.#tick)
    clearInterval(this.#beat)
    clearTimeout(this.#ownCheck)
    this.#due.stop()
    ctx.blocking.disconnect() // no read left to make this sidecar a consumer again
    if (ctx.available) {
      // holding nothing: no trace left (holding something, the lease stays, and the others take it over)
      const leaving = Promise.all([forgetConsumers(ctx, ctx.consumer, 0), ctx.lease.holds ? undefined : this.#reaper.release()]).catch(() => {})
      await Promise.race([leaving, new Promise(resolve => setTimeout(resolve, LEAVE_WAIT_MS).unref())])
    }
    ctx.close()
  }
}
