import { readFileSync, writeFileSync } from 'node:fs'
import type { BenchReport } from './report.ts'

// The README shows the last run's figures between two markers, so they are always current.
export const SUMMARY_START = '<!-- bench-summary:start (written by npm run bench from bench/results/latest.json; edits here are overwritten) -->'
export const SUMMARY_END = '<!-- bench-summary:end -->'

const cell = (text: string): string => text.replace(/\s*\n\s*/g, ' ').replaceAll('|', '\\|').replaceAll('*', '\\*')

/**
 * The README's short form of a bench report: the count of targets met and every target with its
 * figure (the median of the rounds); every table stays in latest.md.
 */
export function renderSummary (report: BenchReport): string {
  const env = report.environment
  const checks = report.scenarios.flatMap(s => s.checks)
  const met = checks.filter(c => c.status === 'PASS').length
  return [
    `Last run: ${report.date.slice(0, 10)}, Node ${env.node}, ${env.cpuModel} × ${env.cpuCount}, every process on one machine over loopback; ` +
    `${report.settings.rounds} round${report.settings.rounds === 1 ? '' : 's'} of ${report.settings.durationSeconds} s per phase. ` +
    `${met} of ${checks.length} targets met; every table, target and profile: [\`bench/results/latest.md\`](bench/results/latest.md).`,
    '',
    '| scenario | target | result | measured |',
    '|---|---|---|---|',
    ...report.scenarios.flatMap(s => s.checks.map(c => `| ${s.name} | ${cell(c.label)} | ${c.status} | ${cell(measured(c.detail))} |`))
  ].join('\n')
}

/** A check's figure without its margin (`0.93× (per round: …)`), or its whole detail when it has none. */
const measured = (detail: string): string => detail.split('; margin ')[0] ?? detail

/** Replaces what stands between the markers in `readmeFile` with the summary; false when the markers are missing. */
export function updateReadme (readmeFile: string, report: BenchReport): boolean {
  const text = readFileSync(readmeFile, 'utf8')
  const start = text.indexOf(SUMMARY_START)
  const end = text.indexOf(SUMMARY_END)
  if (start === -1 || end < start) return false
  writeFileSync(readmeFile, `${text.slice(0, start + SUMMARY_START.length)}\n${renderSummary(report)}\n${text.slice(end)}`)
  return true
}
