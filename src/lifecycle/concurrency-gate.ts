import { AppNotReadyError, QueueFullError } from '../errors.ts'
import { DEFAULT_URGENCY, FairQueue, URGENCY_LEVELS } from '../shared/fair-queue.ts'

/** Frees the slot a call holds; calling it more than once does nothing. */
export type Release = () => void

/** What the gate reports, for metrics. */
export interface GateObserver {
  /** In flight (slots held) changed by `delta`. */
  inflight: (delta: number) => void
  /** Waiting (for a slot or for the app's first readiness) changed by `delta`. */
  queued: (delta: number) => void
}

/** The urgency of the queued run the async runner would take next; undefined: none, or not known (it yields to every call). */
export type NextRunUrgency = () => number | undefined

interface Waiter {
  readonly grant: (release: Release) => void
  readonly caller: string
  settled: boolean
}

/** A run of unknown urgency yields to every call (calls go first within an urgency). */
export const LAST_URGENCY = URGENCY_LEVELS - 1

/** Slots one caller holds (kept while it holds none, until a sweep). */
interface CallerCount { held: number }

/** The callers' map is swept of idle callers once it holds this many, then each time it doubles. */
const SWEEP_MIN = 1024

const waiterLive = (waiter: Waiter): boolean => !waiter.settled

/**
 * At most `limit` calls in flight to the app (0: no limit), the rest waiting in a queue of at most
 * `queueDepth` (beyond it, 503 with Retry-After), served by urgency (`Priority`), then round robin
 * across callers, each caller's own in order. A caller holding `callerLimit` slots (0: no limit)
 * waits until one of its calls ends while the others go ahead. The gate stays shut until `open()`
 * (the app's first readiness), so early calls wait instead of failing.
 */
export class ConcurrencyGate {
  readonly #limit: number
  readonly #queueDepth: number
  readonly #callerLimit: number
  readonly #observer: GateObserver
  /** Slots held per caller; callers holding none are swept out as the map doubles (not at each release: the fast path does one lookup). */
  readonly #held = new Map<string, CallerCount>()
  #sweepAt = SWEEP_MIN
  readonly #waiters: FairQueue<Waiter>
  #inflight = 0
  #waiting = 0
  #open = false
  /** Waiting for a slot no call goes before (async runs, which yield to calls of the same urgency or more urgent). */
  #idleWatchers: Array<() => void> = []
  #nextRun: NextRunUrgency | undefined
  #callerFreed: ((caller: string) => void) | undefined

  /** APP_READY_TIMEOUT_SECONDS in ms: the longest a call waits while the app was never ready (0: no bound). */
  readonly #readyTimeoutMs: number

  constructor (limit: number, queueDepth: number, observer: GateObserver, callerLimit = 0, readyTimeoutMs = 0) {
    this.#limit = limit
    this.#readyTimeoutMs = readyTimeoutMs
    this.#queueDepth = queueDepth
    this.#callerLimit = callerLimit
    this.#observer = observer
    this.#waiters = new FairQueue(waiterLive, callerLimit > 0 ? caller => this.capped(caller) : undefined)
  }

  get inflight (): number { return this.#inflight }
  get waiting (): number { return this.#waiting }

  /** The most slots one caller holds now (sidecar_busiest_caller_inflight); O(callers), for a scrape. */
  get busiestCallerInflight (): number {
    let most = 0
    for (const count of this.#held.values()) if (count.held > most) most = count.held
    return most
  }

  /** The `count` callers holding the most slots now, most first (the console's busiest callers); O(callers). */
  busiestCallers (count: number): Array<{ caller: string, inflight: number }> {
    const holding: Array<{ caller: string, inflight: number }> = []
    for (const [caller, { held }] of this.#held) if (held > 0) holding.push({ caller, inflight: held })
    return holding.sort((a, b) => b.inflight - a.inflight || (a.caller < b.caller ? -1 : 1)).slice(0, count)
  }

  /** The caller holds CALLER_MAX_INFLIGHT slots: its next call waits. */
  capped (caller: string | undefined): boolean {
    return this.#callerLimit > 0 && caller !== undefined && (this.#held.get(caller)?.held ?? 0) >= this.#callerLimit
  }

  /** The callers holding CALLER_MAX_INFLIGHT slots now (none without a limit); O(callers). */
  cappedCallers (): string[] {
    if (this.#callerLimit === 0) return []
    const capped: string[] = []
    for (const [caller, count] of this.#held) if (count.held >= this.#callerLimit) capped.push(caller)
    return capped
  }

  /** Told when a capped caller's call ends (its runs set aside may go now). */
  onCallerFreed (listener: (caller: string) => void): void {
    this.#callerFreed = listener
  }

  /** The app is ready: let waiting calls through. */
  open (): void {
    this.#open = true
    this.#dispatch()
  }

  /** A slot at once when one is free and nobody waits but capped callers (the fast path); else undefined. */
  tryAcquire (caller?: string): Release | undefined {
    return this.#open && this.#hasSlot() && (this.#waiting === 0 || this.#onlyCappedWait()) && !this.capped(caller) ? this.#take(caller) : undefined
  }

  /**
   * A slot for a queued async run of `urgency` when one is free, its caller is not capped and no
   * waiting call of the same urgency or more urgent could have it; else undefined.
   */
  tryAcquireRun (urgency: number, caller: string | undefined): Release | undefined {
    if (!this.#open || !this.#hasSlot()) return undefined
    if (!this.capped(caller) && urgency < this.#waiters.nextUrgency()) return this.#take(caller)
    this.#dispatch() // the slot the run leaves goes to the waiting call
    return undefined
  }

  /**
   * Resolves once the gate is open, a slot is free and no waiting call goes before the run the
   * runner would take next (`nextRun`: calls of the same urgency or more urgent go first; unknown,
   * every call does). Async runs take their slot then, with tryAcquireRun.
   * `signal` aborts the wait, rejecting with its reason.
   */
  whenSlotFree (signal: AbortSignal, nextRun?: NextRunUrgency): Promise<void> {
    this.#nextRun = nextRun
    if (this.#slotForRun()) return Promise.resolve()
    if (signal.aborted) return Promise.reject(signal.reason as Error)
    return new Promise<void>((resolve, reject) => {
      const abandon = (): void => {
        this.#idleWatchers = this.#idleWatchers.filter(watcher => watcher !== wake)
        reject(signal.reason as Error)
      }
      const wake = (): void => {
        signal.removeEventListener('abort', abandon)
        resolve()
      }
      this.#idleWatchers.push(wake)
      signal.addEventListener('abort', abandon, { once: true })
    })
  }

  /** Whether a run could have a slot now (whenSlotFree would resolve at once). */
  get slotFreeForRun (): boolean {
    return this.#slotForRun()
  }

  /** Serves waiting calls again (the run the gate kept a slot for is gone). */
  reconsider (): void {
    this.#dispatch()
  }

  /**
   * Waits for a slot, by `urgency` (0–7), then round robin across callers. `signal` aborts the
   * wait (deadline, caller gone), rejecting with its reason. Throws QueueFullError at once when the
   * queue is full.
   */
  acquire (signal: AbortSignal, urgency = DEFAULT_URGENCY, caller = ''): Promise<Release> {
    const ready = this.tryAcquire(caller)
    if (ready !== undefined) return Promise.resolve(ready)
    // an abort that came first ends the wait at once (its listener would never fire)
    if (signal.aborted) return Promise.reject(signal.reason as Error)
    if (this.#waiting >= this.#queueDepth) throw new QueueFullError(1)
    return new Promise<Release>((resolve, reject) => {
      let notReady: NodeJS.Timeout | undefined
      const waiter: Waiter = { grant: release => { clearTimeout(notReady); resolve(release) }, caller, settled: false }
      this.#waiters.push(urgency, caller, waiter)
      this.#waiting++
      this.#observer.queued(1)
      const leave = (reason: Error): void => {
        if (waiter.settled) return
        waiter.settled = true // dropped from the queue when met, or as its caller's line keeps too many
        clearTimeout(notReady)
        this.#waiters.forget(urgency, caller)
        this.#waiting--
        this.#observer.queued(-1)
        reject(reason)
        this.#wakeIdleWatchers()
      }
      signal.addEventListener('abort', () => { leave(signal.reason as Error) }, { once: true })
      // an app never ready (a wrong APP_URL, an app that cannot start) is not waited for without end
      if (!this.#open && this.#readyTimeoutMs > 0) {
        notReady = setTimeout(() => { if (!this.#open) leave(new AppNotReadyError(this.#readyTimeoutMs / 1000)) }, this.#readyTimeoutMs)
      }
      // the waiters before it may all be capped callers
      if (this.#open && this.#hasSlot()) this.#dispatch()
    })
  }

  /** Every waiting call is a capped caller's: a call of another caller need not queue behind them. */
  #onlyCappedWait (): boolean {
    return this.#callerLimit > 0 && this.#waiters.nextUrgency() === URGENCY_LEVELS
  }

  #slotForRun (): boolean {
    return this.#open && this.#hasSlot() && this.#runUrgency() < this.#waiters.nextUrgency()
  }

  /** The next run's urgency, as it competes with calls (a call of the same urgency goes first): an unknown one, after every call. */
  #runUrgency (): number {
    return this.#nextRun?.() ?? LAST_URGENCY
  }

  #hasSlot (): boolean {
    return this.#limit === 0 || this.#inflight < this.#limit
  }

  #take (caller: string | undefined): Release {
    this.#inflight++
    this.#observer.inflight(1)
    const count = caller === undefined ? undefined : this.#countOf(caller)
    if (count !== undefined) count.held++
    let released = false
    return () => {
      if (released) return
      released = true
      this.#inflight--
      this.#observer.inflight(-1)
      if (count !== undefined && --count.held === this.#callerLimit - 1) this.#unpark(caller as string)
      this.#dispatch()
    }
  }

  #countOf (caller: string): CallerCount {
    let count = this.#held.get(caller)
    if (count === undefined) {
      if (this.#held.size >= this.#sweepAt) this.#sweep()
      count = { held: 0 }
      this.#held.set(caller, count)
    }
    return count
  }

  /** Forgets the callers holding no slot; the next sweep when the map has doubled again (amortised O(1)). */
  #sweep (): void {
    for (const [caller, count] of this.#held) if (count.held === 0) this.#held.delete(caller)
    this.#sweepAt = Math.max(SWEEP_MIN, 2 * this.#held.size)
  }

  /** A capped caller's call ended: its waiting calls and runs are served again. */
  #unpark (caller: string): void {
    this.#waiters.unpark(caller)
    this.#callerFreed?.(caller)
  }

  #dispatch (): void {
    while (this.#waiting > 0 && this.#open && this.#hasSlot()) {
      const urgency = this.#waiters.nextUrgency()
      if (urgency === URGENCY_LEVELS) break
      // a queued run more urgent goes first (only while the runner waits to take it)
      if (this.#idleWatchers.length > 0 && this.#runUrgency() < urgency) break
      const waiter = this.#waiters.shift() as Waiter
      waiter.settled = true
      this.#waiting--
      this.#observer.queued(-1)
      waiter.grant(this.#take(waiter.caller))
    }
    this.#wakeIdleWatchers()
  }

  #wakeIdleWatchers (): void {
    if (this.#idleWatchers.length === 0 || !this.#slotForRun()) return
    const watchers = this.#idleWatchers
    this.#idleWatchers = []
    for (const wake of watchers) wake()
  }
}
