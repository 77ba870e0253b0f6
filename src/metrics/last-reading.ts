/** How long a scrape waits for a fresh reading before it shows the last one. */
const FRESH_WAIT_MS = 250

/**
 * A figure read from elsewhere (the run store) for a scrape: the fresh value when it comes within
 * FRESH_WAIT_MS, else the last one, so a store that does not answer never holds /metrics. One
 * read at a time: a scrape during a slow read waits on that one.
 */
export class LastReading<T = number> {
  readonly #read: () => Promise<T>
  #value: T
  #reading: Promise<void> | undefined

  constructor (read: () => Promise<T>, initial: T) {
    this.#read = read
    this.#value = initial
  }

  async value (): Promise<T> {
    this.#reading ??= this.#read().then(value => { this.#value = value }, () => {}).finally(() => { this.#reading = undefined })
    let timer: NodeJS.Timeout | undefined
    await Promise.race([this.#reading, new Promise(resolve => { timer = setTimeout(resolve, FRESH_WAIT_MS) })])
    clearTimeout(timer)
    return this.#value
  }
}
