/**
 * Counts the work a drain must wait for (requests, streams, WebSockets) and tells whoever waits
 * the moment it reaches zero.
 */
export class InflightTracker {
  #count = 0
  #began = 0
  #idleWaiters: Array<() => void> = []

  get count (): number { return this.#count }

  /** Work begun so far (a drain uses it to tell whether anything arrived while it waited). */
  get began (): number { return this.#began }

  begin (): void {
    this.#count++
    this.#began++
  }

  end (): void {
    this.#count--
    if (this.#count === 0 && this.#idleWaiters.length > 0) {
      const waiters = this.#idleWaiters
      this.#idleWaiters = []
      for (const wake of waiters) wake()
    }
  }

  /** Resolves when nothing is in flight (at once if nothing is). */
  idle (): Promise<void> {
    if (this.#count === 0) return Promise.resolve()
    return new Promise(resolve => { this.#idleWaiters.push(resolve) })
  }
}
