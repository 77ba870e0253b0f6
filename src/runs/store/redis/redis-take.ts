import type { RedisClient } from './redis-connect.ts'
import { guard, type RedisContext } from './redis-context.ts'
import { TAKE } from './redis-queue-scripts.ts'

/** A run taken: run id, entry, record as queued, urgency ('' none), caller; and, when TAKE started it, its start. */
export interface TakeReply {
  readonly runId: string
  readonly entry: string
  readonly queued: string
  readonly urgency: string
  readonly caller: string
  readonly started?: StartedTake
}

/** What TAKE's start wrote and read: the record as started, the request (JSON), body and webhook (null none). */
export interface StartedTake { readonly record: string, readonly request: Buffer | null, readonly body: Buffer | null, readonly webhook: Buffer | null }

const text = (value: unknown): string => value instanceof Buffer ? value.toString() : String(value)
const bytesOrNull = (value: unknown): Buffer | null => value instanceof Buffer ? value : null

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
    const { keys, args, look } = this.request(client !== ctx.redis)
    let reply: unknown
    try {
      reply = await guard(TAKE.runBuffer(client, keys, args), client === ctx.redis ? undefined : Infinity)
    } catch (error) {
      this.cut()
      throw error
    }
    return this.parse(reply, look)
  }

  /** TAKE's keys and arguments as this sidecar sends it now (END_AND_TAKE sends them behind a run's end). */
  request (woken = false): { keys: string[], args: Array<string | number>, look: boolean } {
    const ctx = this.#ctx
    const own = ctx.own
    const look = Date.now() >= this.#lookAt
    const now = Date.now()
    return {
      keys: [own.turns, own.fair, own.wake, own.queue, own.queuedBytes, own.expiry, own.runs],
      args: [ctx.consumer, own.run(''), look ? LOOK_PAGE : 0, this.capped().join('\n'), now, new Date(now).toISOString(), woken ? '1' : ''],
      look
    }
  }

  /** A take's answer lost (a timeout, a cut connection): a run it took is pending here, unknown; this store's own pending entries are looked at soon. */
  cut (): void {
    this.#ctx.lease.takeCut = true
    this.#ctx.checkOwn?.()
  }

  /** TAKE's reply (bulk strings as Buffers), and what it tells the next take. */
  parse (reply: unknown, look: boolean): TakeReply | typeof STALE | typeof CAPPED | undefined {
    if (reply === 0) return STALE
    const taken = reply as unknown[]
    if (taken[0] === -1) {
      this.nextUrgency = taken[1] as number
      return CAPPED
    }
    const seen = (taken.length === 1 ? taken[0] : taken[6]) as number
    if (look) this.#lookAt = seen >= LOOK_PAGE ? 0 : Date.now() + LOOK_EVERY_MS
    this.backlog = false
    if (taken.length === 1) {
      // none queued: the next take waits for a wake-up first (a run queued since left one)
      this.drained = true
      this.nextUrgency = undefined
      return undefined
    }
    this.drained = taken[5] === 1
    this.backlog = !this.drained
    this.nextUrgency = typeof taken[7] === 'number' ? taken[7] : undefined
    return {
      runId: text(taken[0]),
      entry: text(taken[1]),
      queued: text(taken[2]),
      urgency: text(taken[3]),
      caller: text(taken[4]),
      started: { record: text(taken[8]), request: bytesOrNull(taken[9]), body: bytesOrNull(taken[10]), webhook: bytesOrNull(taken[11]) }
    }
  }

  /** A run of `urgency` was queued (here, or a wake-up told it): the first turn is at least that urgent. */
  queued (urgency: number): void {
    if (this.nextUrgency === undefined || urgency < this.nextUrgency) this.nextUrgency = urgency
  }
}
