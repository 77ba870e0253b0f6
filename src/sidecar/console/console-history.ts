import type { Registry } from 'prom-client'
import { histogramBuckets, quantileBetween, readSum, requestsByClass, STATUS_CLASSES, type StatusClass } from './console-readings.ts'

/** One point of the console's charts (docs/console.md, "Charts"); null where the interval says nothing. */
export interface HistoryPoint {
  /** Epoch seconds. */
  readonly time: number
  /** Requests answered per second over the interval before, by status class. */
  readonly perSecond: Readonly<Record<StatusClass, number | null>>
  /** Latency quantiles of the requests answered over the interval before, in seconds. */
  readonly p50: number | null
  readonly p99: number | null
  /** Slots in use, calls waiting, async runs waiting (every replica sharing the store), at the sample. */
  readonly slots: number
  readonly waiting: number
  readonly backlog: number
}

/** What a reading of the metrics gives: counters and histogram buckets, kept for the next interval's rates. */
interface Reading {
  readonly at: number
  readonly answered: Record<StatusClass, number>
  readonly latency: Map<number, number>
}

/** 15 minutes at one sample every 5 s. */
export const HISTORY_INTERVAL_MS = 5000
export const HISTORY_POINTS = 180

/**
 * The last 15 minutes of the sidecar's traffic, kept in memory: every 5 s a reading of its own
 * metrics (the same figures a scrape gets), the oldest point dropped past 180. Runs only while the
 * console is on (CONSOLE_TOKEN).
 */
export class ConsoleHistory {
  readonly #registry: Registry
  readonly #points: HistoryPoint[] = []
  #last: Reading | undefined
  #timer: NodeJS.Timeout | undefined
  #sampling: Promise<void> | undefined

  constructor (registry: Registry) {
    this.#registry = registry
  }

  /** Takes a first reading now, then one every `intervalMs`. */
  start (intervalMs = HISTORY_INTERVAL_MS): void {
    void this.sample()
    this.#timer = setInterval(() => { void this.sample() }, intervalMs).unref()
  }

  stop (): void { clearInterval(this.#timer) }

  /** The points kept, oldest first. */
  get points (): readonly HistoryPoint[] { return this.#points }

  /** One reading, kept as a point (the first one's rates null: no interval before it). A reading still under way is not doubled. */
  async sample (now = Date.now()): Promise<void> {
    this.#sampling ??= this.#read(now).finally(() => { this.#sampling = undefined })
    await this.#sampling
  }

  async #read (now: number): Promise<void> {
    const registry = this.#registry
    const [answered, latency, slots, waiting, backlog] = await Promise.all([
      requestsByClass(registry),
      histogramBuckets(registry, 'sidecar_request_duration_seconds'),
      readSum(registry, 'sidecar_inflight_requests'),
      readSum(registry, 'sidecar_queued_requests'),
      readSum(registry, 'sidecar_async_queued_runs')
    ])
    const reading: Reading = { at: now, answered, latency }
    const last = this.#last
    this.#last = reading
    const seconds = last === undefined ? 0 : (now - last.at) / 1000
    const perSecond = Object.fromEntries(STATUS_CLASSES.map(type =>
      [type, last === undefined || seconds <= 0 ? null : (answered[type] - last.answered[type]) / seconds])) as Record<StatusClass, number | null>
    this.#points.push({
      time: Math.round(now / 1000),
      perSecond,
      p50: last === undefined ? null : quantileBetween(last.latency, latency, 0.5),
      p99: last === undefined ? null : quantileBetween(last.latency, latency, 0.99),
      slots,
      waiting,
      backlog
    })
    if (this.#points.length > HISTORY_POINTS) this.#points.shift()
  }

  /** The points as columns, as the page's charts take them. */
  columns (): Record<string, ReadonlyArray<number | null>> {
    const points = this.#points
    const column = (pick: (point: HistoryPoint) => number | null): Array<number | null> => points.map(pick)
    return {
      time: column(p => p.time),
      ...Object.fromEntries(STATUS_CLASSES.map(type => [type, column(p => p.perSecond[type])])),
      p50: column(p => p.p50),
      p99: column(p => p.p99),
      slots: column(p => p.slots),
      waiting: column(p => p.waiting),
      backlog: column(p => p.backlog)
    }
  }
}
