import { send } from './http-client.ts'

/** One sample line of Prometheus text (`name{labels} value`). */
export interface MetricSample {
  /** `name` or `name{a="b",…}`, exactly as written. */
  readonly key: string
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

const SAMPLE_LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g

const numberOf = (text: string): number => text === '+Inf' ? Infinity : text === '-Inf' ? -Infinity : Number(text)
const unescape = (value: string): string => value.replace(/\\(.)/g, (_m, c: string) => c === 'n' ? '\n' : c)

/** Every sample in Prometheus text, in order (comments and blank lines skipped). */
export function parseMetrics (text: string): MetricSample[] {
  const samples: MetricSample[] = []
  for (const line of text.split('\n')) {
    const match = SAMPLE_LINE.exec(line)
    if (match === null) continue
    const labels: Record<string, string> = {}
    for (const [, name, value] of (match[2] ?? '').matchAll(LABEL)) labels[name as string] = unescape(value as string)
    samples.push({ key: (match[1] as string) + (match[2] ?? ''), name: match[1] as string, labels, value: numberOf(match[3] as string) })
  }
  return samples
}

/** The value of the sample `name` whose labels are exactly `labels` (none: the unlabelled one); undefined when absent. */
export function sampleValue (text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = Object.entries(labels)
  return parseMetrics(text).find(s => s.name === name && Object.keys(s.labels).length === wanted.length &&
    wanted.every(([label, value]) => s.labels[label] === value))?.value
}

/** The text of `<admin>/metrics`; throws unless the admin port answers 200 (a dead port fails the test). */
export async function fetchMetrics (admin: string): Promise<string> {
  const r = await send(`${admin}/metrics`)
  if (r.status !== 200) throw new Error(`${admin}/metrics answered ${r.status}: ${r.text}`)
  return r.text
}

/** Every sample of one scrape of `h`'s admin port, keyed `name` or `name{labels}` as written. */
export async function scrape (h: { admin: string }): Promise<Record<string, number>> {
  return Object.fromEntries(parseMetrics(await fetchMetrics(h.admin)).map(s => [s.key, s.value]))
}

/** The value of one sample on `h`'s /metrics; throws when it is absent. */
export async function metric (h: { admin: string }, name: string, labels: Record<string, string> = {}): Promise<number> {
  const value = sampleValue(await fetchMetrics(h.admin), name, labels)
  if (value === undefined) throw new Error(`no ${name}${JSON.stringify(labels)} in /metrics`)
  return value
}

/** Every sample of `<admin>/metrics`, fetched over a kept-alive connection within 5 s (the bench polls it); throws unless it answers 200. */
export async function scrapeMetrics (admin: string): Promise<MetricSample[]> {
  const response = await fetch(`${admin}/metrics`, { signal: AbortSignal.timeout(5000) })
  if (response.status !== 200) throw new Error(`${admin}/metrics answered ${response.status}`)
  return parseMetrics(await response.text())
}

/** The sum of `name`'s samples whose labels include every label of `match` (none: all of them). */
export function sumOf (samples: readonly MetricSample[], name: string, match: Record<string, string> = {}): number {
  let total = 0
  for (const s of samples) {
    if (s.name === name && Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value
  }
  return total
}
