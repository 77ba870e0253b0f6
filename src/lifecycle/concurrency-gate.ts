import { QueueFullError } from '../errors.ts'

/** Frees the slot a call holds; calling it more than once does nothing. */
export type Release = () => void

/** What the gate reports, for metrics. */
export interface GateObserver {
  /** In flight (slots held) changed by `delta`. */
  inflight: (delta: number) => void
  /** Waiting (for a slot or for the app's first readiness) changed by `delta`. */
  queued: (delta: number) => void
}

interface Waiter {
  grant: (release: Release) => void
  reject: (error: Error) => void
  settled: boolean
}

/**
 * At most `limit` calls in flight to the app (0: no limit), the rest waiting first come, first
 * served in a queue of at most `queueDepth`; beyond it, 503 with Retry-After. The gate stays shut
 * until `open()` (the app's first readiness), so early calls wait instead of failing.
 */
export class ConcurrencyGate {
  readonly #limit: number
  readonly #queueDepth: number
  readonly #observer: GateObserver
  readonly #queue: Waiter[] = []
  #head = 0
  #inflight = 0
  #waiting = 0
  #open = false
  /** Waiting for a slot nobody queued for (async runs, which yield to every call). */
  #idleWatchers: Array<() => void> = []

  constructor (limit: number, queueDepth: number, observer: GateObserver) {
    this.#limit = limit
    this.#queueDepth = queueDepth
    this.#observer = observer
  }

  get inflight (): number { return this.#inflight }
  get waiting (): number { return this.#waiting }

  /** The app is ready: let waiting calls through. */
  open (): void {
    this.#open = true
    this.#dispatch()
  }

  /** A slot at once when one is free and nobody waits (the fast path); else undefined. */
  tryAcquire (): Release | undefined {
    return this.#open && this.#waiting === 0 && this.#hasSlot() ? this.#take() : undefined
  }

  /**
   * Resolves once the gate is open, a slot is free and no call waits for one: async runs take
   * their slot then (with tryAcquire), so a call waiting for a slot always goes first.
   * `signal` aborts the wait, rejecting with its reason.
   */
  whenSlotFree (signal: AbortSignal): Promise<void> {
    if (this.#slotFree()) return Promise.resolve()
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

  /**
   * Waits for a slot, first come first served. `signal` aborts the wait (deadline, caller gone),
   * rejecting with its reason. Throws QueueFullError at once when the queue is full.
   */
  acquire (signal: AbortSignal): Promise<Release> {
    const ready = this.tryAcquire()
    if (ready !== undefined) return Promise.resolve(ready)
    if (this.#waiting >= this.#queueDepth) throw new QueueFullError(1)
    return new Promise<Release>((resolve, reject) => {
      const waiter: Waiter = { grant: resolve, reject, settled: false }
      this.#queue.push(waiter)
      this.#waiting++
      this.#observer.queued(1)
      signal.addEventListener('abort', () => {
        if (waiter.settled) return
        waiter.settled = true
        this.#waiting--
        this.#observer.queued(-1)
        reject(signal.reason as Error)
        this.#compact()
        this.#wakeIdleWatchers()
      }, { once: true })
    })
  }

  #slotFree (): boolean {
    return this.#open && this.#waiting === 0 && this.#hasSlot()
  }

  #hasSlot (): boolean {
    return this.#limit === 0 || this.#inflight < this.#limit
  }

  #take (): Release {
    this.#inflight++
    this.#observer.inflight(1)
    let released = false
    return () => {
      if (released) return
      released = true
      this.#inflight--
      this.#observer.inflight(-1)
      this.#dispatch()
    }
  }

  #dispatch (): void {
    while (this.#open && this.#head < this.#queue.length && this.#hasSlot()) {
      const waiter = this.#queue[this.#head++] as Waiter
      if (waiter.settled) continue
      waiter.settled = true
      this.#waiting--
      this.#observer.queued(-1)
      waiter.grant(this.#take())
    }
    this.#compact()
    this.#wakeIdleWatchers()
  }

  #wakeIdleWatchers (): void {
    if (this.#idleWatchers.length === 0 || !this.#slotFree()) return
    const watchers = this.#idleWatchers
    this.#idleWatchers = []
    for (const wake of watchers) wake()
  }

  /** Drops settled waiters from the front so the queue array does not grow without bound. */
  #compact (): void {
    while (this.#head < this.#queue.length && (this.#queue[this.#head] as Waiter).settled) this.#head++
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue.splice(0, this.#head)
      this.#head = 0
    } else if (this.#head === this.#queue.length) {
      this.#queue.length = 0
      this.#head = 0
    }
  }
}
