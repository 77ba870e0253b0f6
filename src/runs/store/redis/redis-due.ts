import { guard, type RedisContext } from './redis-context.ts'
import { LOOK_DUE } from './redis-due-scripts.ts'
import { DEFAULT_QUEUE_TTL_SECONDS } from '../../run-expiry.ts'

/**
 * Members of the app's due set that are not runs (a run id has no ':'): `lease:<consumer>`, the time
 * (Redis's clock) by which a sidecar holding entries or claims must have beaten again, else it is
 * lost; `left:<entry>`, a delivery a sidecar left for another (due at once); and
 * `gone:<consumer>`, when a lost sidecar's consumer may be removed from the app's groups.
 */
export const LEASE = 'lease:'
/** Said on the app's cancel channel by a sidecar that left something due at once (a stop's deliveries): every sidecar looks now. */
export const LOOK_NOW = ':due'
export const LEFT = 'left:'
export const GONE = 'gone:'

/** Most members one look fails or reaps; the rest are the next look's. */
const BATCH = 64
/** The least time between two looks: what is due again at once (a store failing, a batch left) never makes a loop. */
const LOOK_GAP_MS = 100

/** What falls due: queued runs past their time limit, and lease or gone members (sidecars lost, or long gone). */
export interface DueHandlers {
  readonly runs: (runIds: readonly string[]) => Promise<void>
  readonly leases: (members: readonly string[]) => Promise<void>
}

/**
 * When this sidecar looks at the app's due set (`…:expiry`, a sorted set by epoch ms: every queued
 * run at its time limit, every holding sidecar's lease, the deliveries left, the gone sidecars to
 * forget): once every RUN_LOST_AFTER_SECONDS (`tick`: one ZRANGE of the head, the only command an
 * idle sidecar sends), looking at once when the head is due; and at the time limit of the first
 * queued run it knows of (one it queued, or the head as read), for each fails within 1 s of it. A
 * lease a tick reads is looked at when it falls due (it has moved by then if its sidecar beats: one
 * look per tick at most), so a lost sidecar's runs fail within RUN_LOST_AFTER_SECONDS + 30 s.
 */
export class RedisDue {
  readonly #ctx: RedisContext
  readonly #handlers: DueHandlers
  #timer: NodeJS.Timeout | undefined
  #at = Infinity
  #looking = false
  /** Redis's clock less this one's, as the last look saw it (the set's times are Redis's, but for runs' time limits). */
  #offset = 0

  constructor (ctx: RedisContext, handlers: DueHandlers) {
    this.#ctx = ctx
    this.#handlers = handlers
  }

  /** Something falls due at `at` (epoch ms): a look then, unless one is due sooner (or it is two ticks away or more: a tick sees it). */
  schedule (at: number): void {
    if (at >= this.#at || at - Date.now() > 2 * this.#ctx.lostAfterMs) return
    clearTimeout(this.#timer)
    this.#at = at
    this.#timer = setTimeout(() => { void this.#look() }, Math.max(LOOK_GAP_MS, at - Date.now()))
    this.#timer.unref()
  }

  /**
   * The liveness look: the due set's head, and the queued index's oldest run (its TTL moment: a run's
   * ASYNC_QUEUE_TTL_SECONDS is not in the due set), each sent alone (a stalled Redis never delays a
   * request's commands behind them).
   */
  async tick (): Promise<void> {
    if (this.#ctx.closed || this.#looking) return
    // RESP3 (this store's protocol) answers [[member, score]]; RESP2 [member, score]
    const head = (await guard(this.#ctx.redis.call('ZRANGE', this.#ctx.own.expiry, 0, 0, 'WITHSCORES')) as unknown[]).flat()
    if (head.length === 2) this.#headIs(String(head[0]), Number(head[1]) - this.#offset, true)
    const oldest = (await guard(this.#ctx.redis.call('ZRANGE', this.#queued, 0, 0, 'WITHSCORES')) as unknown[]).flat()
    if (oldest.length === 2) this.schedule(Number(oldest[1]) + this.#ttlMs)
  }

  get #queued (): string { return `${this.#ctx.own.runs}:queued` }
  get #ttlMs (): number { return (this.#ctx.settings.queueTtlSeconds ?? DEFAULT_QUEUE_TTL_SECONDS) * 1000 }

  /**
   * The set's first member and when it falls due here: a run's time limit is waited for; a lease
   * as a tick reads it too (so a lost sidecar is found at its lease's time, not a window later), but
   * not again after a look (a live sidecar's lease moves with each beat: no look per beat).
   */
  #headIs (member: string, at: number, ticked = false): void {
    if (ticked || !member.includes(':') || at <= Date.now()) this.schedule(at)
  }

  stop (): void {
    clearTimeout(this.#timer)
    this.#at = Infinity
  }

  async #look (): Promise<void> {
    this.#at = Infinity
    if (this.#ctx.closed || this.#looking) return
    this.#looking = true
    let next: { member: string, at: number } | undefined
    try {
      const { now, next: after, queuedAt, due } = await guard(LOOK_DUE.call(this.#ctx.redis, { dueSet: this.#ctx.own.expiry, queuedIndex: this.#queued, count: BATCH, queueTtlMs: this.#ttlMs }))
      this.#offset = now - Date.now()
      if (after !== undefined) next = { member: after.member, at: after.at - this.#offset }
      if (queuedAt !== undefined && (next === undefined || queuedAt < next.at)) next = { member: '', at: queuedAt }
      const runs = due.filter(member => !member.includes(':'))
      const leases = due.filter(member => member.includes(':'))
      if (runs.length > 0) await this.#handlers.runs(runs)
      if (leases.length > 0) await this.#handlers.leases(leases)
    } catch {
      // the store is down (availability says so, and the tick looks again), or a run could not be read: looked at again soon
      next = { member: '', at: Date.now() + this.#ctx.heartbeatMs }
    } finally {
      this.#looking = false
    }
    if (next !== undefined) this.#headIs(next.member, next.at)
  }
}
