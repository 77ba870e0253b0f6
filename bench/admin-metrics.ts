/**
 * Reading the sidecar's admin `/metrics` (Prometheus text): the samples of the metrics a
 * scenario checks (webhook deliveries, concurrency gauges), by name and labels.
 */
export interface Sample {
  readonly name: string
  readonly labels: Record<string, string>
  readonly value: number
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g

export function parseMetrics (text: string): Sample[] {
  const samples: Sample[] = []
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue
    const match = LINE.exec(line)
    if (match === null) continue
    const labels: Record<string, string> = {}
    for (const [, key, value] of (match[2] ?? '').matchAll(LABEL)) labels[key as string] = value as string
    samples.push({ name: match[1] as string, labels, value: Number(match[3]) })
  }
  return samples
}

export async function scrapeMetrics (adminOrigin: string): Promise<Sample[]> {
  const response = await fetch(`${adminOrigin}/metrics`, { signal: AbortSignal.timeout(5000) })
  if (response.status !== 200) throw new Error(`${adminOrigin}/metrics answered ${response.status}`)
  return parseMetrics(await response.text())
}

/** The sum of `name`'s samples whose labels include every label of `match`. */
export function sumOf (samples: Sample[], name: string, match: Record<string, string> = {}): number {
  let total = 0
  for (const s of samples) {
    if (s.name !== name) continue
    if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value
  }
  return total
}
