import { performance } from 'node:perf_hooks'

interface Snapshot { at: number, area: number, requests: number }

/**
 * What an autoscaler reads: concurrency averaged over time (not sampled), and requests per
 * second, over a sliding window. In-flight changes integrate concurrency × time exactly; a
 * snapshot per second gives the window's start.
 */
export class ConcurrencyStats {
  readonly #windowMs: number
  readonly #snapshots: Snapshot[] = []
  readonly #timer: NodeJS.Timeout
  #current = 0
  #area = 0
  #requests = 0
  #last = performance.now()

  constructor (windowSeconds = 10) {
    this.#windowMs = windowSeconds * 1000
    this.#snapshots.push({ at: this.#last, area: 0, requests: 0 })
    this.#timer = setInterval(() => { this.#snapshot() }, 1000)
    this.#timer.unref()
  }

  /** In flight changed by `delta` (a call took or freed a slot). */
  change (delta: number): void {
    const now = performance.now()
    this.#area += this.#current * (now - this.#last)
    this.#last = now
    this.#current += delta
    if (delta > 0) this.#requests += delta
  }

  /** Time-weighted average concurrency over the window (or since start, when younger). */
  averageConcurrency (): number {
    const { elapsed, area } = this.#sinceWindowStart()
    return elapsed > 0 ? area / elapsed : this.#current
  }

  /** Calls admitted per second over the window. */
  requestsPerSecond (): number {
    const { elapsed, requests } = this.#sinceWindowStart()
    return elapsed > 0 ? requests / (elapsed / 1000) : 0
  }

  stop (): void { clearInterval(this.#timer) }

  #sinceWindowStart (): { elapsed: number, area: number, requests: number } {
    const now = performance.now()
    const area = this.#area + this.#current * (now - this.#last)
    const start = this.#snapshots[0] as Snapshot
    return { elapsed: now - start.at, area: area - start.area, requests: this.#requests - start.requests }
  }

  #snapshot (): void {
    const now = performance.now()
    this.#snapshots.push({ at: now, area: this.#area + this.#current * (now - this.#last), requests: this.#requests })
    while (this.#snapshots.length > 1 && now - (this.#snapshots[1] as Snapshot).at >= this.#windowMs) this.#snapshots.shift()
  }
}
