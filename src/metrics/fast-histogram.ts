import type { Registry } from 'prom-client'

/** One label set's counts: an observation is a bucket search and three adds. */
export class HistogramCell {
  readonly labels: Readonly<Record<string, string>>
  readonly #bounds: readonly number[]
  /** Observations per bucket (not cumulative); the last slot is above every bound. */
  readonly counts: Float64Array
  sum = 0
  count = 0

  constructor (bounds: readonly number[], labels: Readonly<Record<string, string>>) {
    this.#bounds = bounds
    this.labels = labels
    this.counts = new Float64Array(bounds.length + 1)
  }

  observe (value: number): void {
    const bounds = this.#bounds
    let i = 0
    while (i < bounds.length && value > (bounds[i] as number)) i++
    this.counts[i] = (this.counts[i] as number) + 1
    this.sum += value
    this.count++
  }
}

interface ExportedValue {
  labels: Record<string, string | number>
  value: number
  metricName: string
}

/**
 * A Prometheus histogram for the per-request hot path, registered in a prom-client registry and
 * read by it at scrape time. prom-client's own `observe` hashes the label set on every call
 * (a few µs per request, paid by every call of every replica); here each label set is a cell
 * held by its caller, and the scrape text is the same as prom-client's.
 */
export class FastHistogram {
  readonly name: string
  readonly help: string
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  readonly #bounds: readonly number[]
  readonly #labelName: string | undefined
  readonly #cells = new Map<string, HistogramCell>()

  constructor (options: { name: string, help: string, buckets: readonly number[], labelName?: string, registry: Registry }) {
    this.name = options.name
    this.help = options.help
    this.#bounds = [...options.buckets].sort((a, b) => a - b)
    this.#labelName = options.labelName
    // like prom-client, a histogram without labels shows its zeros from the start
    if (options.labelName === undefined) this.cell()
    options.registry.registerMetric(this as never)
  }

  /** The cell of one label value (none for a histogram without a label); keep it. */
  cell (labelValue = ''): HistogramCell {
    let cell = this.#cells.get(labelValue)
    if (cell === undefined) {
      cell = new HistogramCell(this.#bounds, this.#labelName === undefined ? {} : { [this.#labelName]: labelValue })
      this.#cells.set(labelValue, cell)
    }
    return cell
  }

  /** What prom-client's registry formats: per label set, cumulative buckets, `+Inf`, sum and count. */
  async get (): Promise<{ name: string, help: string, type: string, aggregator: string, values: ExportedValue[] }> {
    const values: ExportedValue[] = []
    const bucket = `${this.name}_bucket`
    for (const cell of this.#cells.values()) {
      let total = 0
      this.#bounds.forEach((bound, i) => {
        total += cell.counts[i] as number
        values.push({ labels: { le: bound, ...cell.labels }, value: total, metricName: bucket })
      })
      values.push(
        { labels: { le: '+Inf', ...cell.labels }, value: cell.count, metricName: bucket },
        { labels: { ...cell.labels }, value: cell.sum, metricName: `${this.name}_sum` },
        { labels: { ...cell.labels }, value: cell.count, metricName: `${this.name}_count` }
      )
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }

  reset (): void {
    for (const cell of this.#cells.values()) {
      cell.counts.fill(0)
      cell.sum = 0
      cell.count = 0
    }
  }
}
