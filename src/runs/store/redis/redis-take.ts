import { countsAttempts } from './redis-attempts.ts'
import type { RedisClient } from './redis-connect.ts'
import { guard, type RedisContext } from './redis-context.ts'
import type { FieldsOf } from './redis-named-script.ts'
import { TAKE, type TakeOutcome, type TakeReply } from './redis-queue-scripts.ts'

/** TAKE passed over turns of runs no longer queued: ask again. */
export const STALE: unique symbol = Symbol('stale')

/** Every run queued is a capped caller's (CALLER_MAX_INFLIGHT here): left for other replicas, asked again as a caller frees. */
export const CAPPED: unique symbol = Symbol('capped')

/** How often a take looks for runs queued by the version before turns, once it has read every entry (a rolling upgrade's are given a turn within this). */
const LOOK_EVERY_MS = 10_000
/** Entries unread with `>` one look reads at most: a full page means more may follow, and the next take looks again. */
const LOOK_PAGE = 100

/**
 * TAKE as one sidecar sends it (redis-queue-scripts.ts): with `look` now and then, and what its
 * answers tell the next take.
 */
export class TurnTaker {
  /**
   * The last run taken here left no turn: the next take waits for a wake-up before it asks (a run
   * queued since left one in the wake list, so the wait ends at once), instead of asking for
   * nothing first.
   */
  drained = false
  /** The last take left turns behind it (a backlog): a run's end takes the next along (END_AND_TAKE); a submit's hint alone does not, the run may be another's by then. */
  backlog = false
  /** The urgency of the app's first turn as the last take saw it (undefined: none queued): how a runner competes with waiting calls without asking. */
  nextUrgency: number | undefined
  /** This sidecar's capped callers (CALLER_MAX_INFLIGHT), whose runs a take passes over. */
  capped: () => readonly string[] = () => []
  /** When the next take looks for runs of the version before turns: at once while a look reads a full page, else every LOOK_EVERY_MS. */
  #lookAt = 0
  readonly #ctx: RedisContext

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
  }

  /**
   * Sends TAKE on `client` at once (on the blocking connection, right behind a BLPOP, Redis runs
   * it as the wait ends: no round trip between the wake-up and the take). The run taken (in this
   * sidecar's pending list), undefined when none is queued, STALE to ask again.
   */
  async take (client: RedisClient): Promise<TakeReply | typeof STALE | typeof CAPPED | undefined> {
    const ctx = this.#ctx
    const { fields, look } = this.request(client !== ctx.redis)
    let outcome: TakeOutcome
    try {
      outcome = await guard(TAKE.call(client, fields), client === ctx.redis ? undefined : Infinity)
    } catch (error) {
      this.cut()
      throw error
    }
    return this.took(outcome, look)
  }

  /** TAKE's fields as this sidecar sends it now (END_AND_TAKE sends them behind a run's end), and whether it looks for the version before's runs. */
  request (woken = false): { fields: FieldsOf<typeof TAKE>, look: boolean } {
    const ctx = this.#ctx
    const own = ctx.own
    const look = Date.now() >= this.#lookAt
    const now = Date.now()
    return {
      fields: {
        turns: own.turns, fair: own.fair, wake: own.wake, queue: own.queue, queuedBytes: own.queuedBytes, dueSet: own.expiry, index: own.runs,
        taker: ctx.consumer, runKeyPrefix: own.run(''), look: look ? LOOK_PAGE : 0, cappedCallers: this.capped().join('\n'),
        startedAtMs: now, startedAtIso: new Date(now).toISOString(), woken: woken ? '1' : '', attempts: countsAttempts(ctx) ? '1' : ''
      },
      look
    }
  }

  /** A take's answer lost (a timeout, a cut connection): a run it took is pending here, unknown; this store's own pending entries are looked at soon. */
  cut (): void {
    this.#ctx.lease.takeCut = true
    this.#ctx.checkOwn?.()
  }

  /** What TAKE answered (`look`: sent with a look), and what it tells the next take. */
  took (outcome: TakeOutcome, look: boolean): TakeReply | typeof STALE | typeof CAPPED | undefined {
    if (outcome.kind === 'stale') return STALE
    if (outcome.kind === 'capped') {
      this.nextUrgency = outcome.urgency
      return CAPPED
    }
    if (look) this.#lookAt = outcome.seen >= LOOK_PAGE ? 0 : Date.now() + LOOK_EVERY_MS
    if (outcome.kind === 'none') {
      // none queued: the next take waits for a wake-up first (a run queued since left one)
      this.backlog = false
      this.drained = true
      this.nextUrgency = undefined
      return undefined
    }
    this.drained = outcome.drained
    this.backlog = !this.drained
    this.nextUrgency = outcome.next
    return outcome.run
  }

  /** A run of `urgency` was queued (here, or a wake-up told it): the first turn is at least that urgent. */
  queued (urgency: number): void {
    if (this.nextUrgency === undefined || urgency < this.nextUrgency) this.nextUrgency = urgency
  }
}
