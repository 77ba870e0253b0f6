import type { Registry } from 'prom-client'

// What the console shows is read from the sidecar's own metrics, by name, as a scrape reads them:
// the console adds no hook to a call, and its figures are the ones Prometheus sees.

/** One sample of a metric: its labels and value (a histogram's `_bucket`, `_sum` and `_count` named by `metricName`). */
export interface MetricValue {
  readonly labels: Readonly<Record<string, string | number>>
  readonly value: number
  readonly metricName?: string
}

/** The samples of metric `name` now (its collect runs, as at a scrape); none when it is not registered. */
export async function readMetric (registry: Registry, name: string): Promise<readonly MetricValue[]> {
  const metric = registry.getSingleMetric(name)
  if (metric === undefined) return []
  return (await metric.get()).values as readonly MetricValue[]
}

/** The sum of metric `name`'s samples whose labels include `match`. */
export async function readSum (registry: Registry, name: string, match: Readonly<Record<string, string>> = {}): Promise<number> {
  let sum = 0
  for (const { labels, value } of await readMetric(registry, name)) {
    if (Object.entries(match).every(([label, wanted]) => String(labels[label]) === wanted)) sum += value
  }
  return sum
}

/** Status classes of the requests chart. */
export const STATUS_CLASSES = ['2xx', '3xx', '4xx', '5xx'] as const
export type StatusClass = typeof STATUS_CLASSES[number]

/** sidecar_requests_total summed by status class over every route (a 499 is a 4xx; a 1xx is not charted). */
export async function requestsByClass (registry: Registry): Promise<Record<StatusClass, number>> {
  const counts: Record<StatusClass, number> = { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 }
  for (const { labels, value } of await readMetric(registry, 'sidecar_requests_total')) {
    const type = `${String(labels.code).charAt(0)}xx`
    if (type in counts) counts[type as StatusClass] += value
  }
  return counts
}

/** A histogram's cumulative bucket counts summed over its label sets, by upper bound (`+Inf` last). */
export async function histogramBuckets (registry: Registry, name: string): Promise<Map<number, number>> {
  const buckets = new Map<number, number>()
  for (const { labels, value, metricName } of await readMetric(registry, name)) {
    if (metricName !== `${name}_bucket`) continue
    const bound = labels.le === '+Inf' ? Infinity : Number(labels.le)
    buckets.set(bound, (buckets.get(bound) ?? 0) + value)
  }
  return new Map([...buckets].sort(([a], [b]) => a - b))
}

/**
 * The `q` quantile of the observations between two readings of a histogram's buckets, as
 * Prometheus's histogram_quantile estimates it (linear within a bucket; in `+Inf`, the highest
 * finite bound); null when none was observed.
 */
export function quantileBetween (before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>, q: number): number | null {
  const counts = [...after].map(([bound, count]) => [bound, count - (before.get(bound) ?? 0)] as const)
  const total = counts.at(-1)?.[1] ?? 0
  if (total <= 0) return null
  const rank = q * total
  let lower = 0
  let below = 0
  for (const [bound, cumulative] of counts) {
    if (cumulative >= rank) {
      if (bound === Infinity) return lower
      return cumulative === below ? bound : lower + (bound - lower) * (rank - below) / (cumulative - below)
    }
    lower = bound
    below = cumulative
  }
  return lower
}
