import { LRUCache } from 'lru-cache'

/** Ends kept to write again after a failover: at most this many, this many bytes of results. */
const ENDED_MAX = 10_000
const ENDED_MAX_BYTES = 8 * 1024 * 1024

/** A map that tells when it stops being empty. */
class FirstTold<K, V> extends Map<K, V> {
  readonly #first: () => void
  constructor (first: () => void) {
    super()
    this.#first = first
  }

  override set (key: K, value: V): this {
    const first = this.size === 0
    super.set(key, value)
    if (first) this.#first()
    return this
  }
}

/**
 * What this sidecar holds in the Redis store, and so must keep alive with its heartbeat, or lose
 * to another sidecar after RUN_LOST_AFTER_SECONDS: the stream entries it took (runs, deliveries),
 * the Idempotency-Key claims whose answer is not kept yet, and the runs it ended lately (should a
 * failover lose an end, it is written again after the reconnect). `holding` is told when the first
 * entry or claim is taken while nothing was: the heartbeat starts then, and stops once nothing is held.
 * `ended` sizes: a run's result bytes and a little more, for the bound.
 */
export class RedisLease<Ended extends { readonly resultJson?: string | undefined }> {
  /** Entries held (taken, not ended), by id: their stream. */
  readonly held: Map<string, string>
  /** Idempotency-Key slots claimed whose answer is not kept yet: their run ids. */
  readonly claims: Map<string, string>
  /** Runs ended lately, by entry, kept RUN_LOST_AFTER_SECONDS. */
  readonly ended: LRUCache<string, Ended>
  /** A take's answer was lost (a timeout, a cut connection): the run it took may be pending here unknown (the heartbeat looks). */
  takeCut = false

  constructor (lostAfterMs: number, holding: () => void) {
    this.held = new FirstTold(holding)
    this.claims = new FirstTold(holding)
    // bounded: under load the newest ends are the ones a failover can have lost
    this.ended = new LRUCache({ max: ENDED_MAX, maxSize: ENDED_MAX_BYTES, sizeCalculation: ended => 512 + (ended.resultJson?.length ?? 0), ttl: lostAfterMs })
  }

  /**
   * Whether entries or claims are held: what the heartbeat keeps, and other sidecars take over
   * should this one stop beating. (Ends kept for a failover, and a take whose answer was lost, are
   * looked at after a reconnect or that take, not by the heartbeat: an idle sidecar beats no more.)
   */
  get holds (): boolean {
    return this.held.size > 0 || this.claims.size > 0
  }
}
