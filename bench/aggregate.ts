import type { CpuUse, Measurement } from './load.ts'

/** The median of the defined, finite values; NaN when there is none. */
export function median (values: Array<number | null | undefined>): number {
  const finite = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v)).sort((a, b) => a - b)
  if (finite.length === 0) return NaN
  const mid = finite.length >> 1
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

/** The extras of `rounds` (the rounds used) and `all` (every round), folded by each column's rule; keys without a column: the median. */
function combineExtras (rounds: Measurement[], all: Measurement[], columns: ExtraColumn[]): Record<string, number> | undefined {
  const keys = new Set([...all.flatMap(r => Object.keys(r.extra ?? {}))])
  if (keys.size === 0) return undefined
  const extra: Record<string, number> = {}
  for (const key of keys) {
    const rule = columns.find(c => c.key === key)?.combine ?? 'median'
    const values = (rule === 'median' ? rounds : all).map(r => r.extra?.[key]).filter((v): v is number => typeof v === 'number' && Number.isFinite(v))
    if (values.length === 0) continue
    extra[key] = rule === 'sum' ? sum(values) : rule === 'max' ? Math.max(...values) : median(values)
  }
  return extra
}

/** A round counts as quiet when the rest of the machine used at most this many cores meanwhile. */
export const QUIET_CORES = 0.1

const isQuiet = (m: Measurement): boolean => m.cpu?.backgroundCores === null || m.cpu?.backgroundCores === undefined || m.cpu.backgroundCores <= QUIET_CORES

/**
 * One phase's measurements over several rounds, folded into one. Other load on a shared machine
 * only ever makes a target look worse, and it can hit one target in most rounds and another in
 * none, so the quiet rounds (see QUIET_CORES) are used when there are any, all rounds otherwise
 * (then `disturbed` is set). Of those: the median of each rate and latency statistic, the
 * maximum of the maxima; the counts are summed over every round. Valid only when every round was (all of them,
 * quiet or not: an error is never noise).
 */
export function combineRounds (all: Measurement[], columns: ExtraColumn[] = []): Measurement {
  const quiet = all.filter(isQuiet)
  const disturbed = quiet.length === 0
  const rounds = disturbed ? all : quiet
  const provenance = { roundsUsed: rounds.length, disturbed }
  if (all.length === 1) return { ...(all[0] as Measurement), ...provenance }
  const extra = combineExtras(rounds, all, columns)
  const statusCodes: Record<string, number> = {}
  for (const round of all) {
    for (const [code, n] of Object.entries(round.statusCodes)) statusCodes[code] = (statusCodes[code] ?? 0) + n
  }
  const cpus = rounds.map(r => r.cpu).filter((c): c is CpuUse => c !== undefined)
  const byProcess: Record<string, number> = {}
  for (const cpu of cpus) {
    for (const [name, seconds] of Object.entries(cpu.byProcess)) byProcess[name] = (byProcess[name] ?? 0) + seconds
  }
  const first = rounds[0] as Measurement
  const peaks = all.map(r => r.peakRssMb).filter((v): v is number => v !== undefined)
  return {
    rps: median(rounds.map(r => r.rps)),
    p50Ms: median(rounds.map(r => r.p50Ms)),
    p90Ms: median(rounds.map(r => r.p90Ms)),
    p99Ms: median(rounds.map(r => r.p99Ms)),
    maxMs: Math.max(...rounds.map(r => r.maxMs)),
    meanMs: median(rounds.map(r => r.meanMs)),
    ok: sum(all.map(r => r.ok)),
    errors: sum(all.map(r => r.errors)),
    timeouts: sum(all.map(r => r.timeouts)),
    non2xx: sum(all.map(r => r.non2xx)),
    statusCodes,
    durationSeconds: sum(all.map(r => r.durationSeconds)),
    connections: Math.max(...rounds.map(r => r.connections)),
    ...(first.targetRate === undefined ? {} : { targetRate: first.targetRate }),
    valid: all.every(r => r.valid),
    ...provenance,
    // memory is not noise from other load: the highest peak of every round
    ...(peaks.length === 0 ? {} : { peakRssMb: Math.max(...peaks), peakRssPhaseOnly: all.every(r => r.peakRssPhaseOnly !== false) }),
    ...(extra === undefined ? {} : { extra }),
    ...(cpus.length === 0
      ? {}
      : {
          cpu: {
            targetSeconds: orNull(median(cpus.map(c => c.targetSeconds))),
            appSeconds: orNull(median(cpus.map(c => c.appSeconds))),
            loadGeneratorSeconds: median(cpus.map(c => c.loadGeneratorSeconds)),
            targetUsPerRequest: orNull(median(cpus.map(c => c.targetUsPerRequest))),
            targetCoresUsed: orNull(median(cpus.map(c => c.targetCoresUsed))),
            appUsPerRequest: orNull(median(cpus.map(c => c.appUsPerRequest))),
            backgroundCores: orNull(median(cpus.map(c => c.backgroundCores))),
            byProcess
          }
        })
  }
}

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
  const quiet: number[] = []
  const usable: number[] = []
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const x = a[i]
    const y = b[i]
    const bothQuiet = x !== undefined && y !== undefined && isQuiet(x) && isQuiet(y)
    perRoundQuiet.push(bothQuiet)
    if (x === undefined || y === undefined || !x.valid || !y.valid) { perRound.push(null); continue }
    const value = compare(x, y)
    if (!Number.isFinite(value)) { perRound.push(null); continue }
    perRound.push(value)
    usable.push(value)
    if (bothQuiet) quiet.push(value)
  }
  const chosen = quiet.length > 0 ? quiet : usable
  return { value: chosen.length === 0 ? null : median(chosen), perRound, perRoundQuiet, disturbed: usable.length > 0 && quiet.length === 0 }
}
