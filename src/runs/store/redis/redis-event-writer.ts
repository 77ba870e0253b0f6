import { RunStoreUnavailableError } from '../../../errors.ts'
import type { TakenRun } from '../../run-data.ts'
import { guard, type RedisContext, ScopeKeys } from './redis-context.ts'
import { APPEND_EVENT } from './redis-scripts.ts'

interface PendingEvent {
  readonly n: number
  readonly data: string
  readonly bytes: number
}

/** Pauses between rounds of writes that all failed (Redis unreachable, loading, out of memory). */
const RETRY_MIN_MS = 100
const RETRY_MAX_MS = 1000
/** Rounds that all failed before the writer gives up (about two minutes, as long as a run's end is retried). */
const RETRY_ROUNDS = 120
/**
 * Bytes of events on their way to Redis at once (at least one event): past it, events wait here
 * and go in rounds of about this many, each once the one before is answered. A Redis that is slow
 * to answer then holds back this much of a run's events in the client's buffers, not the run's
 * whole kept events again and again.
 */
const ROUND_BYTES = 4 * 1024 * 1024

const pause = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, ms).unref()) }

/**
 * One running run's events on their way to Redis, written in order whatever happens to the
 * commands. They go out at once (pipelined) while every write succeeds; APPEND_EVENT refuses an
 * event whose predecessor is missing, so a write that fails (a NOSCRIPT whose EVAL comes after
 * later events, Redis unreachable or stalled) stops the flow: once the writes in flight are
 * answered, the events not written go again, in order, from the first of them, until they are all
 * written. Events waiting here are bounded as the kept ones are (RUN_MAX_EVENTS,
 * RUN_MAX_EVENT_BYTES: the oldest go first, and readers see the gap), and those on their way by
 * ROUND_BYTES (a Redis slow to answer). Writes that keep failing for
 * about two minutes are given up and reported (listener.truncated), never dropped in silence.
 */
export class RunEventWriter {
  readonly #ctx: RedisContext
  readonly #run: TakenRun
  readonly #keys: ScopeKeys
  /** Called once nothing is pending any more (the writer may be forgotten). */
  readonly #onIdle: () => void
  /** Events not known to be written, in order. */
  #pending: PendingEvent[] = []
  #bytes = 0
  #inFlight = 0
  #inFlightBytes = 0
  /** A write failed, or Redis is behind: events wait here and go in rounds, in order. */
  #retrying = false
  /** The rounds are under way. */
  #looping = false
  /** Events at the end of `#pending` added since the current round was sent, and their bytes. */
  #unsent = 0
  #unsentBytes = 0
  #waiters: Array<{ resolve: () => void, reject: (error: unknown) => void }> = []

  constructor (ctx: RedisContext, run: TakenRun, onIdle: () => void) {
    this.#ctx = ctx
    this.#run = run
    this.#keys = new ScopeKeys(run.scope)
    this.#onIdle = onIdle
  }

  /** Event `n` (the next one); never waits, never throws. */
  add (n: number, data: string): void {
    const event: PendingEvent = { n, data, bytes: Buffer.byteLength(data) }
    this.#pending.push(event)
    this.#bytes += event.bytes
    // Redis is behind: hold the rest here, bounded
    if (!this.#retrying && (this.#overBounds(this.#pending.length, this.#bytes) || this.#inFlightBytes >= ROUND_BYTES)) this.#retrying = true
    if (this.#retrying) {
      this.#unsent++
      this.#unsentBytes += event.bytes
      this.#trim()
      if (this.#inFlight === 0) void this.#retry()
      return
    }
    this.#inFlight++
    this.#inFlightBytes += event.bytes
    this.#write(event, false).then(result => { this.#settled(event, result !== 'gap') }, () => { this.#settled(event, false) })
  }

  /** Resolves once every event added is written (or given up); rejects while Redis cannot be reached (the caller retries). */
  async flushed (): Promise<void> {
    if (this.#pending.length === 0 && this.#inFlight === 0) return
    await new Promise<void>((resolve, reject) => { this.#waiters.push({ resolve, reject }) })
  }

  #settled (event: PendingEvent, written: boolean): void {
    this.#inFlight--
    this.#inFlightBytes -= event.bytes
    if (written) this.#forget(event)
    else this.#retrying = true
    if (this.#inFlight > 0) return
    if (this.#retrying) void this.#retry()
    else this.#idleIfDone()
  }

  /** Rounds of writes of the events pending (ROUND_BYTES of them), the first allowed to follow a gap (the ones before it are written or dropped). */
  async #retry (): Promise<void> {
    if (this.#looping) return
    this.#looping = true
    let failedRounds = 0
    while (this.#pending.length > 0 && !this.#ctx.closed) {
      const { round, bytes } = this.#nextRound()
      this.#unsent = this.#pending.length - round.length
      this.#unsentBytes = this.#bytes - bytes
      const results = await Promise.allSettled(round.map(async (event, i) => await this.#write(event, i === 0)))
      let failure: unknown
      const written = new Set<PendingEvent>()
      results.forEach((result, i) => {
        if (result.status === 'fulfilled' && result.value !== 'gap') written.add(round[i] as PendingEvent)
        else if (result.status === 'rejected') failure ??= result.reason
      })
      if (written.size > 0) {
        this.#pending = this.#pending.filter(event => !written.has(event))
        for (const event of written) this.#bytes -= event.bytes
        failedRounds = 0
        continue
      }
      if (failure instanceof RunStoreUnavailableError) this.#rejectWaiters(failure)
      if (++failedRounds >= RETRY_ROUNDS) {
        this.#giveUp(failure)
        break
      }
      await pause(Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** (failedRounds - 1)))
    }
    if (this.#ctx.closed) this.#pending = []
    this.#looping = false
    this.#retrying = false
    this.#idleIfDone()
  }

  /** The first events pending, ROUND_BYTES of them at most (at least one), and their bytes. */
  #nextRound (): { round: PendingEvent[], bytes: number } {
    let bytes = 0
    let size = 0
    for (const event of this.#pending) {
      if (size > 0 && bytes + event.bytes > ROUND_BYTES) break
      bytes += event.bytes
      size++
    }
    return { round: this.#pending.slice(0, size), bytes }
  }

  /** Appended, or refused (written already: a retry; or not this writer's); a gap: an event before it is missing. */
  async #write (event: PendingEvent, skip: boolean): Promise<'appended' | 'refused' | 'gap'> {
    const { settings, redis } = this.#ctx
    const keys = this.#keys
    const runId = this.#run.runId
    return await guard(APPEND_EVENT.call(redis, {
      run: keys.run(runId), events: keys.events(runId),
      entryId: `0-${event.n + 1}`, data: event.data, maxEvents: settings.maxEvents, liveChannel: keys.live(runId), n: event.n,
      maxBytes: settings.maxEventBytes, skip: skip ? '1' : '', writer: this.#ctx.consumer
    }))
  }

  #overBounds (events: number, bytes: number): boolean {
    return events > this.#ctx.settings.maxEvents || bytes > this.#ctx.settings.maxEventBytes
  }

  /**
   * The oldest events not sent yet go while they alone pass the bounds (the newest stays): newer
   * ones would push them out of the kept events anyway, as they push out the ones sent before them.
   */
  #trim (): void {
    while (this.#unsent > 1 && this.#overBounds(this.#unsent, this.#unsentBytes)) {
      const [dropped] = this.#pending.splice(this.#pending.length - this.#unsent, 1) as [PendingEvent]
      this.#bytes -= dropped.bytes
      this.#unsentBytes -= dropped.bytes
      this.#unsent--
    }
  }

  #forget (event: PendingEvent): void {
    const i = this.#pending.indexOf(event)
    if (i < 0) return
    this.#pending.splice(i, 1)
    this.#bytes -= event.bytes
  }

  #giveUp (failure: unknown): void {
    const first = (this.#pending[0] as PendingEvent).n
    const last = (this.#pending.at(-1) as PendingEvent).n
    this.#pending = []
    this.#bytes = 0
    const why = failure instanceof Error ? failure.message : 'refused'
    this.#ctx.listener?.truncated?.(this.#run.scope, this.#run.runId, `events ${first} to ${last} not written to the run store (${why})`)
  }

  #rejectWaiters (error: unknown): void {
    const waiters = this.#waiters
    this.#waiters = []
    for (const waiter of waiters) waiter.reject(error)
  }

  #idleIfDone (): void {
    if (this.#pending.length > 0 || this.#inFlight > 0 || this.#retrying) return
    const waiters = this.#waiters
    this.#waiters = []
    for (const waiter of waiters) waiter.resolve()
    this.#onIdle()
  }
}
