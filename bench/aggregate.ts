import type { CpuUse, Measurement } from './load.ts'

/** The median of the defined, finite values; NaN when there is none. */
export function median (values: Array<number | null | undefined>): number {
  const finite = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v)).sort((a, b) => a - b)
  const mid = finite.length >> 1
  if (finite.length === 0) return NaN
  return finite.length % 2 === 1 ? finite[mid] as number : ((finite[mid - 1] as number) + (finite[mid] as number)) / 2
}

const sum = (values: number[]): number => values.reduce((total, v) => total + v, 0)
const orNull = (n: number): number | null => Number.isFinite(n) ? n : null

/** A scenario's own figure of a phase (a key of `Measurement.extra`), as a table column. */
export interface ExtraColumn {
  readonly key: string
  readonly label: string
  /** How the rounds fold: the median of the rounds used (default), or the sum / the maximum over every round (counts of failures). */
  readonly combine?: 'median' | 'sum' | 'max'
  /** Digits after the point in the table (default 0). */
  readonly digits?: number
}

/** A round counts as quiet when the rest of the machine used at most this many cores meanwhile. */
export const QUIET_CORES = 0.1

const isQuiet = (m: Measurement): boolean => (m.cpu?.backgroundCores ?? 0) <= QUIET_CORES

/** Adds up records of numbers key by key (status codes, CPU seconds per process). */
function addUp (records: Array<Record<string, number>>): Record<string, number> {
  const total: Record<string, number> = {}
  for (const record of records) for (const [key, n] of Object.entries(record)) total[key] = (total[key] ?? 0) + n
  return total
}

/**
 * One phase's measurements over several rounds, folded into one. Other load on a shared machine
 * only ever makes a target look worse, and it can hit one target in most rounds and another in
 * none, so the quiet rounds (see QUIET_CORES) are used when there are any, all rounds otherwise
 * (then `disturbed` is set). Of those: the median of each rate and latency statistic, the maximum
 * of the maxima; counts are summed over every round, and memory (not noise) is the highest peak of
 * every round. Valid only when every round was (quiet or not: an error is never noise).
 */
export function combineRounds (all: Measurement[], columns: ExtraColumn[] = []): Measurement {
  const quiet = all.filter(isQuiet)
  const rounds = quiet.length === 0 ? all : quiet
  const provenance = { roundsUsed: rounds.length, disturbed: quiet.length === 0 }
  if (all.length === 1) return { ...(all[0] as Measurement), ...provenance }
  const med = (figure: (m: Measurement) => number | undefined): number => median(rounds.map(figure))
  const extra: Record<string, number> = {}
  const extraKeys = new Set(all.flatMap(r => Object.keys(r.extra ?? {})))
  for (const key of extraKeys) {
    const rule = columns.find(c => c.key === key)?.combine ?? 'median'
    const values = (rule === 'median' ? rounds : all).map(r => r.extra?.[key]).filter((v): v is number => typeof v === 'number' && Number.isFinite(v))
    if (values.length > 0) extra[key] = rule === 'sum' ? sum(values) : rule === 'max' ? Math.max(...values) : median(values)
  }
  const cpus = rounds.flatMap(r => r.cpu === undefined ? [] : [r.cpu])
  const peaks = all.flatMap(r => r.peakRssMb === undefined ? [] : [r.peakRssMb])
  return {
    rps: med(r => r.rps),
    p50Ms: med(r => r.p50Ms),
    p90Ms: med(r => r.p90Ms),
    p99Ms: med(r => r.p99Ms),
    maxMs: Math.max(...rounds.map(r => r.maxMs)),
    meanMs: med(r => r.meanMs),
    ok: sum(all.map(r => r.ok)),
    errors: sum(all.map(r => r.errors)),
    timeouts: sum(all.map(r => r.timeouts)),
    non2xx: sum(all.map(r => r.non2xx)),
    statusCodes: addUp(all.map(r => r.statusCodes)),
    durationSeconds: sum(all.map(r => r.durationSeconds)),
    connections: Math.max(...rounds.map(r => r.connections)),
    ...((rounds[0] as Measurement).targetRate === undefined ? {} : { targetRate: (rounds[0] as Measurement).targetRate }),
    valid: all.every(r => r.valid),
    ...provenance,
    ...(peaks.length === 0 ? {} : { peakRssMb: Math.max(...peaks), peakRssPhaseOnly: all.every(r => r.peakRssPhaseOnly !== false) }),
    ...(extraKeys.size === 0 ? {} : { extra }),
    ...(cpus.length === 0 ? {} : { cpu: { ...cpuMedians(cpus), byProcess: addUp(cpus.map(c => c.byProcess)) } })
  }
}

const CPU_FIGURES = ['targetSeconds', 'appSeconds', 'loadGeneratorSeconds', 'targetUsPerRequest', 'targetCoresUsed', 'appUsPerRequest', 'backgroundCores'] as const

/** The median of each CPU figure over the rounds (null when no round has it). */
const cpuMedians = (cpus: CpuUse[]): Omit<CpuUse, 'byProcess'> =>
  Object.fromEntries(CPU_FIGURES.map(key => [key, orNull(median(cpus.map(c => c[key])))])) as unknown as Omit<CpuUse, 'byProcess'>

/** A comparison of two targets made round by round (same minutes, same machine state), then the median. */
export interface Paired {
  /** Median over the rounds where both sides were quiet, or over all usable rounds when none was; null when none is usable. */
  readonly value: number | null
  readonly perRound: Array<number | null>
  /** Per round: both sides were quiet (so the round counts in `value` when any round was quiet). */
  readonly perRoundQuiet: boolean[]
  /** No round was quiet for both sides. */
  readonly disturbed: boolean
}

/**
 * `compare(a, b)` in every round where both measurements exist and are valid. Comparing within a
 * round cancels the slow drifts of a shared machine (a host that is busier for minutes) that
 * comparing medians taken at different times does not.
 */
export function pairedByRound (a: Array<Measurement | undefined>, b: Array<Measurement | undefined>, compare: (a: Measurement, b: Measurement) => number): Paired {
  const perRound: Array<number | null> = []
  const perRoundQuiet: boolean[] = []
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const [x, y] = [a[i], b[i]]
    perRoundQuiet.push(x !== undefined && y !== undefined && isQuiet(x) && isQuiet(y))
    const value = x === undefined || y === undefined || !x.valid || !y.valid ? NaN : compare(x, y)
    perRound.push(Number.isFinite(value) ? value : null)
  }
  const usable = perRound.filter((v): v is number => v !== null)
  const quiet = perRound.filter((v, i): v is number => v !== null && perRoundQuiet[i] === true)
  const chosen = quiet.length > 0 ? quiet : usable
  return { value: chosen.length === 0 ? null : median(chosen), perRound, perRoundQuiet, disturbed: usable.length > 0 && quiet.length === 0 }
}
