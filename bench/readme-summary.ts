import { readFileSync, writeFileSync } from 'node:fs'
import { type BenchReport, int, type ScenarioReport } from './report.ts'

/**
 * The short form of a bench report that the project README shows, between two markers, so the
 * README's figures are always those of the last run: per scenario, the first phase's rate of
 * every target (× the baseline) with the sidecar's CPU and memory, then every target check.
 */
export const SUMMARY_START = '<!-- bench-summary:start (written by npm run bench from bench/results/latest.json; edits here are overwritten) -->'
export const SUMMARY_END = '<!-- bench-summary:end -->'

const cell = (text: string): string => text.replace(/\s*\n\s*/g, ' ').replaceAll('|', '\\|').replaceAll('*', '\\*')

/** The check's figure without its per-round list: `0.90×`, `+3.19 ms`. */
const figureOf = (detail: string): string => detail.split(/ \(per round|; /)[0] ?? detail

function ratesRow (scenario: ScenarioReport): string {
  const phase = scenario.phases[0]
  if (phase === undefined) return `| ${scenario.name} | – | – | – |`
  const baseline = scenario.targets.find(t => t.id === scenario.baselineId)?.phases[phase.id]
  const rates = scenario.targets.map(target => {
    if (target.skipped !== undefined) return `${target.id} skipped`
    const m = target.phases[phase.id]
    if (m === undefined) return `${target.id} failed`
    const times = target.id !== scenario.baselineId && baseline !== undefined && baseline.valid && m.valid
      ? ` (${(m.rps / baseline.rps).toFixed(2)}×)`
      : ''
    return `${target.id} ${m.valid ? int(m.rps) : 'invalid'}${times}${m.disturbed === true ? ' †' : ''}`
  })
  const sidecar = scenario.targets.find(t => t.id === 'sidecar') ?? scenario.targets.find(t => t.id.startsWith('sidecar'))
  const own = sidecar?.phases[phase.id]
  const costs = own === undefined
    ? '–'
    : [own.cpu?.targetCoresUsed == null ? undefined : `${own.cpu.targetCoresUsed.toFixed(2)} vCPU`,
        own.cpu?.targetUsPerRequest == null ? undefined : `${int(own.cpu.targetUsPerRequest)} µs CPU per ${(phase.rateUnit ?? 'req/s').replace(/s?\/s$/, '').replace(/^req$/, 'request')}`,
        own.peakRssMb === undefined ? undefined : `${own.peakRssMb.toFixed(0)} MB peak RSS`]
        .filter(p => p !== undefined).join(', ') || '–'
  return `| ${scenario.name} | ${cell(phase.label)}, ${phase.rateUnit ?? 'req/s'} | ${cell(rates.join(' · '))} | ${cell(costs)} |`
}

export function renderSummary (report: BenchReport): string {
  const env = report.environment
  const lines = [
    `Last run: ${report.date.slice(0, 10)}, Node ${env.node}, ${env.cpuModel} × ${env.cpuCount}, ${env.nginx ?? 'no nginx'}; ` +
    `${report.settings.rounds} round${report.settings.rounds === 1 ? '' : 's'} of ${report.settings.durationSeconds} s per phase. ` +
    'Full tables: [`bench/results/latest.md`](bench/results/latest.md); chart: [`bench/results/latest.svg`](bench/results/latest.svg).',
    '',
    '| scenario | phase | each target (× baseline; † disturbed by other load) | sidecar: CPU, memory |',
    '|---|---|---|---|',
    ...report.scenarios.map(ratesRow),
    '',
    '| scenario | target | result | measured |',
    '|---|---|---|---|',
    ...report.scenarios.flatMap(s => s.checks.map(c => `| ${s.name} | ${cell(c.label)} | **${c.status}** | ${cell(figureOf(c.detail))} |`))
  ]
  return lines.join('\n')
}

/** Replaces what stands between the markers in `readmeFile` with the summary; false when the markers are missing. */
export function updateReadme (readmeFile: string, report: BenchReport): boolean {
  const text = readFileSync(readmeFile, 'utf8')
  const start = text.indexOf(SUMMARY_START)
  const end = text.indexOf(SUMMARY_END)
  if (start === -1 || end < start) return false
  writeFileSync(readmeFile, `${text.slice(0, start + SUMMARY_START.length)}\n${renderSummary(report)}\n${text.slice(end)}`)
  return true
}
