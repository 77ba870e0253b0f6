import { pairedByRound } from './aggregate.ts'
import type { Measurement } from './load.ts'
import { formatOf, perRoundText } from './report.ts'
import type { Check, Ratio, TargetResult } from './scenario.ts'

/**
 * The pieces the scenarios' `evaluate` share: a target's rounds of one phase, comparisons made
 * round by round (see pairedByRound), and a check of a comparison against its target.
 */
export type PhaseRounds = Array<Measurement | undefined>

/** Target `id`'s measurements of one phase, round by round. */
export function roundsOf (results: TargetResult[], id: string, phaseId: string): PhaseRounds {
  return results.find(r => r.id === id)?.rounds.map(r => r[phaseId]) ?? []
}

/** A ratio made round by round: `compare` of the two targets' measurements, then the median (see pairedByRound). */
export function pairedRatio (id: string, label: string, unit: Ratio['unit'], a: PhaseRounds, b: PhaseRounds,
  compare: (x: Measurement, y: Measurement) => number): Ratio {
  return { id, label, unit, ...pairedByRound(a, b, compare) }
}

/** A figure of one target alone, round by round (the second side is the same rounds). */
export function ownFigure (id: string, label: string, unit: Ratio['unit'], a: PhaseRounds, figure: (x: Measurement) => number): Ratio {
  return pairedRatio(id, label, unit, a, a, figure)
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
