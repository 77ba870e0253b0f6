import { pairedByRound } from './aggregate.ts'
import type { Measurement } from './load.ts'
import { formatOf, perRoundText } from './report.ts'
import type { Check, Ratio, TargetResult } from './scenario.ts'

/**
 * The pieces the scenarios' `evaluate` share: a target's rounds of one phase, comparisons made
 * round by round (see pairedByRound), and a check of a comparison against its target.
 */
export type PhaseRounds = Array<Measurement | undefined>
export type Compare = (x: Measurement, y: Measurement) => number

export const rps: Compare = (x, y) => x.rps / y.rps
export const cpuPerRequest: Compare = (x, y) => (x.cpu?.targetUsPerRequest ?? NaN) / (y.cpu?.targetUsPerRequest ?? NaN)
export const p50Delta: Compare = (x, y) => x.p50Ms - y.p50Ms
export const p99Delta: Compare = (x, y) => x.p99Ms - y.p99Ms

/** Target `id`'s measurements of one phase, round by round. */
export function roundsOf (results: TargetResult[], id: string, phaseId: string): PhaseRounds {
  return results.find(r => r.id === id)?.rounds.map(r => r[phaseId]) ?? []
}

/** Whether target `id` ran (is in the results and not skipped). */
export const ran = (results: TargetResult[], id: string): boolean => results.some(r => r.id === id && r.skipped === undefined)

/** A ratio made round by round: `compare` of the two targets' measurements, then the median (see pairedByRound). */
export function pairedRatio (id: string, label: string, unit: Ratio['unit'], a: PhaseRounds, b: PhaseRounds, compare: Compare): Ratio {
  return { id, label, unit, ...pairedByRound(a, b, compare) }
}

/** One pairedRatio per `[id, label, target a, target b]`: a's rounds of `phaseId` against b's, by `compare`. */
export function pairRatios (results: TargetResult[], phaseId: string, unit: Ratio['unit'], compare: Compare,
  pairs: Array<[id: string, label: string, a: string, b: string]>): Ratio[] {
  return pairs.map(([id, label, a, b]) => pairedRatio(id, label, unit, roundsOf(results, a, phaseId), roundsOf(results, b, phaseId), compare))
}

/** A figure of one target alone, round by round (the second side is the same rounds). */
export function ownFigure (id: string, label: string, unit: Ratio['unit'], a: PhaseRounds, figure: (x: Measurement) => number): Ratio {
  return pairedRatio(id, label, unit, a, a, figure)
}

/** The highest of per-round figures (memory: read from every round, also one with failed requests, unlike the rates). */
export function highest (id: string, label: string, perRound: Array<number | null>): Ratio {
  const values = perRound.filter((v): v is number => v !== null)
  return { id, label, unit: 'MB', value: values.length === 0 ? null : Math.max(...values), perRound, perRoundQuiet: perRound.map(() => true), disturbed: false }
}

/** The ratio `id` of `ratios` (a placeholder without a value when it is not there). */
export const ratioById = (ratios: Ratio[], id: string): Ratio => ratios.find(r => r.id === id) ?? { id, label: id, unit: '×', value: null }

/** `<what> was not reached (…)` when a valid measurement ran below `share` of `rate`, else undefined. */
export function rateNotReached (measured: PhaseRounds, rate: number, unit: string, what = 'the paced rate', share = 0.9): string | undefined {
  const short = measured.filter((m): m is Measurement => m !== undefined && m.valid && m.rps < share * rate)
  return short.length > 0 ? `${what} was not reached (${short.map(m => Math.round(m.rps)).join(', ')} ${unit})` : undefined
}

/** `value (per round: …)`, with † when no round was quiet. */
export function withRounds (ratio: Ratio, value: number): string {
  const format = formatOf(ratio)
  const rounds = (ratio.perRound?.length ?? 0) > 1 ? ` (per round: ${perRoundText(ratio, format)})` : ''
  return `${format(value)}${rounds}${ratio.disturbed === true ? '; no round was quiet, disturbed by other load (†)' : ''}`
}

/**
 * PASS when `ratio.value` is on the right side of `limit` (`atLeast`: ≥, else <), with the margin;
 * INVALID when no round had both sides valid, or when `invalid` names a reason.
 */
export function thresholdCheck (label: string, ratio: Ratio, limit: number, atLeast: boolean, invalid?: string): Check {
  if (invalid !== undefined) return { label, status: 'INVALID', detail: invalid }
  if (ratio.value === null) return { label, status: 'INVALID', detail: 'no round where both sides ran without errors' }
  const pass = atLeast ? ratio.value >= limit : ratio.value < limit
  const format = formatOf(ratio)
  const margin = ratio.value - limit
  const sign = margin >= 0 ? '+' : '−'
  const marginText = ratio.unit === '%' ? `${sign}${Math.abs(margin * 100).toFixed(1)} points` : ratio.unit === 'ms' ? format(margin) : `${sign}${format(Math.abs(margin))}`
  return { label, status: pass ? 'PASS' : 'FAIL', detail: `${withRounds(ratio, ratio.value)}; margin ${marginText} against ${format(limit).replace(/^\+/, '')}` }
}

/** thresholdCheck for `ratio ≤ limit`. */
export const atMost = (label: string, ratio: Ratio, limit: number, invalid?: string): Check => thresholdCheck(label, ratio, limit + 1e-9, false, invalid)

/** The builds target `id` ran on: this one (suffix ''), and the older one (`-before`, BENCH_BEFORE_BIN) when it ran there too. */
export function builds (results: TargetResult[], id: string): Array<{ suffix: '' | '-before', label: string }> {
  return [{ suffix: '' as const, label: '' }, { suffix: '-before' as const, label: ', older build (BENCH_BEFORE_BIN)' }].filter(b => b.suffix === '' || ran(results, `${id}${b.suffix}`))
}
