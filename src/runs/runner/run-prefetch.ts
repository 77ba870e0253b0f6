import type { RunQueue } from '../store/run-queue.ts'
import type { TakenRun } from '../run-data.ts'

/** A run held ahead longer than this goes back to the queue (a long run at the app: another replica may be free). */
const HOLD_MAX_MS = 1000

/** A run taken ahead of its slot, and since when. */
interface Held { readonly run: TakenRun, readonly since: number }

/**
 * The next runs, taken while this sidecar's slots are busy, so that a slot that frees never waits
 * on a shared run store (in memory, a take is free: none is taken ahead): at most one held per run at the app (`busy`), each under the same lease as a
 * running one (a sidecar that dies gives them back like any other). A run held past HOLD_MAX_MS
 * (the slot's run is a long one) is given back for another replica, and no run is taken ahead
 * again until one ends here: an app of long runs pays one take and give-back per run, not a loop.
 */
export class RunPrefetch {
  readonly #queue: RunQueue
  readonly #held: Held[] = []
  #taking: Promise<void> | undefined
  /** Why next()'s own take failed (boxed: any value may be a rejection's reason): thrown by next(). */
  #failure: { readonly error: unknown } | undefined
  #busy = 0
  #ahead = true
  #wake: Array<() => void> = []
  readonly #timer: NodeJS.Timeout

  constructor (queue: RunQueue) {
    this.#queue = queue
    this.#timer = setInterval(() => { this.#expire() }, HOLD_MAX_MS / 2)
    this.#timer.unref()
  }

  /** How many runs are held ahead now. */
  get size (): number { return this.#held.length }

  /**
   * The next run for a free slot: a held one at once, else one taken now. While the runs at the
   * app outnumber the ones held, one more is taken in the background.
   */
  async next (signal: AbortSignal): Promise<TakenRun> {
    for (;;) {
      const held = this.#held.shift()
      if (held !== undefined) return held.run
      if (this.#taking === undefined) {
        if (!this.#queue.shared) return await this.#queue.take(signal)
        // a shared store's take blocks on a read: a run put back meanwhile (its caller no longer capped) must not wait behind it
        this.#take(signal, true)
      }
      await this.#changed(signal) // a take is under way: it brings the next run
      const failure = this.#failure
      this.#failure = undefined
      if (failure !== undefined) throw failure.error
    }
  }

  /** The urgency of the run next() would give now; undefined: none, or not known. */
  nextUrgency (): number | undefined {
    const held = this.#held[0]
    return held === undefined ? this.#queue.nextUrgency?.() : held.run.urgency
  }

  /** A run is at the app now: one more may be taken ahead. */
  started (signal: AbortSignal): void {
    this.#busy++
    this.#fill(signal)
  }

  /** A run left the app (its slot is free): taking ahead may start again. */
  ended (signal: AbortSignal): void {
    this.#busy--
    this.#ahead = true
    this.#fill(signal)
  }

  /** A run that could not get its slot after all (a call took it): first again; in memory, back at its place in the queue (a more urgent run may come first). */
  putBack (run: TakenRun): void {
    if (!this.#queue.shared) {
      void this.#queue.release(run).catch(() => {})
      return
    }
    this.#held.unshift({ run, since: Date.now() })
    this.#notify()
  }

  /** Gives every held run back to the queue (a stop). */
  async releaseAll (): Promise<void> {
    clearInterval(this.#timer)
    const held = this.#held.splice(0)
    await Promise.all(held.map(async ({ run }) => { await this.#queue.release(run).catch(() => {}) }))
  }

  #fill (signal: AbortSignal): void {
    // in memory a take costs nothing: nothing to win by taking ahead
    if (!this.#queue.shared || !this.#ahead || this.#taking !== undefined || signal.aborted || this.#held.length >= this.#busy) return
    this.#take(signal, false)
  }

  /** A take in the background, its run held; one for next() (`wanted`) reports its failure to it, one ahead stops taking ahead. */
  #take (signal: AbortSignal, wanted: boolean): void {
    this.#taking = this.#queue.take(signal).then(run => {
      this.#held.push({ run, since: Date.now() })
    }, (error: unknown) => {
      if (wanted) this.#failure = { error }
      else this.#ahead = false
    }).finally(() => {
      this.#taking = undefined
      this.#notify()
      this.#fill(signal)
    })
  }

  /** Held runs past HOLD_MAX_MS go back to the queue; none is taken ahead until a run ends. */
  #expire (): void {
    const now = Date.now()
    while (this.#held.length > 0 && now - (this.#held[0] as Held).since > HOLD_MAX_MS) {
      const { run } = this.#held.shift() as Held
      this.#ahead = false
      void this.#queue.release(run).catch(() => {})
    }
  }

  #notify (): void {
    const wake = this.#wake
    this.#wake = []
    for (const resolve of wake) resolve()
  }

  async #changed (signal: AbortSignal): Promise<void> {
    await new Promise<void>(resolve => {
      const done = (): void => { signal.removeEventListener('abort', done); resolve() }
      this.#wake.push(done)
      signal.addEventListener('abort', done, { once: true })
    })
    if (signal.aborted) throw signal.reason
  }
}
