import type { RunStoreAddress } from '../../../config/run-store-address.ts'
import type { RunStore, RunStoreListener } from '../run-store.ts'
import type { RunScope } from '../../run-data.ts'
import { RedisCallCancels } from './redis-call-cancels.ts'
import { RedisContext, type RedisRunStoreOptions, type RedisStoreSettings } from './redis-context.ts'
import { RedisDeliveries } from './redis-deliveries.ts'
import { RedisExpiry, SWEEP_MS } from './redis-expiry.ts'
import { RedisKeyClaims } from './redis-key-claims.ts'
import { RedisListing } from './redis-listing.ts'
import { checkPersistence, type PersistenceWarn } from './redis-persistence.ts'
import { RedisQueue } from './redis-queue.ts'
import { forgetConsumers, RedisReaper } from './redis-reaper.ts'
import { RedisRecords } from './redis-records.ts'

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
  readonly #timer: NodeJS.Timeout
  readonly #sweep: NodeJS.Timeout

  constructor (address: RunStoreAddress | string, settings: RedisStoreSettings, options: RedisRunStoreOptions = {}) {
    const ctx = new RedisContext(address, settings, options)
    this.#ctx = ctx
    this.queue = new RedisQueue(ctx)
    this.keys = new RedisKeyClaims(ctx)
    this.records = new RedisRecords(ctx, this.keys)
    this.listing = new RedisListing(ctx)
    this.deliveries = new RedisDeliveries(ctx)
    const reaper = new RedisReaper(ctx, this.queue, this.deliveries)
    const calls = new RedisCallCancels(ctx)
    this.#calls = calls
    // the app's cancel channel: an async run's cancel (its run id), or an ask for an in-flight call
    ctx.follow.onMessage(ctx.own.cancel, message => { if (!calls.heard(settings.scope, message)) ctx.listener?.canceled(settings.scope, message) })
    this.#timer = setInterval(() => { void reaper.keepAndReap() }, ctx.heartbeatMs)
    this.#timer.unref()
    const expiry = new RedisExpiry(ctx)
    this.#sweep = setInterval(() => { void expiry.sweep() }, SWEEP_MS)
    this.#sweep.unref()
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
  async cancelCall (_scope: RunScope, runId: string): Promise<boolean> { return await this.#calls.cancel(runId) }

  /** Once Redis first answers: a warn line for each setting that can lose runs (redis-persistence.ts). */
  async checkPersistence (warn: PersistenceWarn): Promise<void> { await checkPersistence(this.#ctx.redis, warn) }

  /** Stops; this sidecar leaves its app's consumer groups when it holds nothing there (what it holds, the others take over, then remove it). */
  async close (): Promise<void> {
    const ctx = this.#ctx
    if (ctx.closed) return
    clearInterval(this.#timer)
    clearInterval(this.#sweep)
    ctx.blocking.disconnect() // no read left to make this sidecar a consumer again
    if (ctx.available) {
      const leaving = forgetConsumers(ctx, ctx.consumer, 0).catch(() => {})
      await Promise.race([leaving, new Promise(resolve => setTimeout(resolve, LEAVE_WAIT_MS).unref())])
    }
    ctx.close()
  }
}
