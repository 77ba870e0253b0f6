import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, release, totalmem, type as osType } from 'node:os'
import { dirname } from 'node:path'
import { type ExtraColumn, QUIET_CORES } from './aggregate.ts'
import { renderChart } from './chart.ts'
import type { Measurement } from './load.ts'
import type { Evaluation, Ratio, Scenario, TargetResult } from './scenario.ts'
import type { BenchSettings } from './settings.ts'

/** bench/results/latest.json: everything measured, machine-readable. */
export interface BenchReport {
  readonly schema: 1
  readonly date: string
  readonly environment: {
    readonly node: string
    readonly platform: string
    readonly cpuModel: string
    readonly cpuCount: number
    readonly memoryGiB: number
    readonly loadAverageAtStart: number[]
    readonly nginx: string | null
  }
  readonly settings: Omit<BenchSettings, 'targets'> & { targets: string[] | null }
  readonly scenarios: ScenarioReport[]
}

export interface PhaseInfo {
  readonly id: string
  readonly label: string
  readonly rateUnit?: string
  readonly columns?: ExtraColumn[]
}

export interface ScenarioReport {
  readonly name: string
  readonly description: string
  /** How the targets were loaded (settings included). */
  readonly method: string
  readonly baselineId: string
  readonly phases: PhaseInfo[]
  readonly targets: TargetResult[]
  readonly ratios: Evaluation['ratios']
  readonly checks: Evaluation['checks']
  readonly notes?: string[]
}

export function environment (nginx: string | null): BenchReport['environment'] {
  const cpuList = cpus()
  return {
    node: process.version,
    platform: `${osType()} ${release()} ${process.arch}`,
    cpuModel: cpuList[0]?.model.trim() ?? 'unknown',
    cpuCount: cpuList.length,
    memoryGiB: Math.round(totalmem() / 1024 ** 3 * 10) / 10,
    loadAverageAtStart: loadavg().map(v => Math.round(v * 100) / 100),
    nginx
  }
}

export function scenarioReport (scenario: Scenario, targets: TargetResult[], evaluation: Evaluation, settings: BenchSettings): ScenarioReport {
  return {
    name: scenario.name,
    description: scenario.description,
    method: scenario.method(settings),
    baselineId: scenario.baselineId,
    phases: scenario.phases.map(p => ({
      id: p.id,
      label: p.label,
      ...(p.rateUnit === undefined ? {} : { rateUnit: p.rateUnit }),
      ...(p.columns === undefined ? {} : { columns: p.columns })
    })),
    targets,
    ratios: evaluation.ratios,
    checks: evaluation.checks,
    ...(evaluation.notes === undefined ? {} : { notes: evaluation.notes })
  }
}

const oneLine = (text: string): string => {
  const flat = text.replace(/\s*\n\s*/g, ' ').replaceAll('|', '\\|')
  return flat.length > 200 ? flat.slice(0, 199) + '…' : flat
}
/** A whole number with thousands separators (`12,345`), `–` when there is none. */
export const int = (n: number | undefined): string => n === undefined || !Number.isFinite(n) ? '–' : Math.round(n).toLocaleString('en-US')
const ms = (n: number | undefined): string => n === undefined || !Number.isFinite(n) ? '–' : n.toFixed(2)
const fixed = (n: number | undefined, digits: number): string => n === undefined || !Number.isFinite(n)
  ? '–'
  : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
const peakRss = (m: Measurement): string => m.peakRssMb === undefined ? '–' : `${m.peakRssMb.toFixed(1)}${m.peakRssPhaseOnly === false ? ' ‡' : ''}`
const signedMs = (n: number): string => `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(2)}`

function problems (m: Measurement | undefined): string | undefined {
  if (m === undefined || m.valid) return undefined
  const parts: string[] = []
  if (m.errors > 0) parts.push(`${m.errors} errors`)
  if (m.timeouts > 0) parts.push(`${m.timeouts} timeouts`)
  if (m.non2xx > 0) {
    const codes = Object.entries(m.statusCodes).filter(([code]) => !code.startsWith('2')).map(([code, n]) => `${n}×${code}`)
    parts.push(`non-2xx: ${codes.join(', ')}`)
  }
  if (m.ok === 0) parts.push('no 2xx response')
  return parts.join(', ')
}

/** How a ratio's values read: `1.23×`, `45.6%`, `1,234 req/s`, `+0.12 ms`, `0.052 vCPU`, `61.2 MB`. */
export function formatOf (ratio: Ratio): (v: number) => string {
  switch (ratio.unit) {
    case '×': return v => `${v.toFixed(2)}×`
    case '%': return v => `${(v * 100).toFixed(1)}%`
    case 'req/s': return v => `${int(v)} req/s`
    case 'vCPU': return v => `${v.toFixed(3)} vCPU`
    case 'MB': return v => `${v.toFixed(1)} MB`
    case 'ms': return v => `${signedMs(v)} ms`
  }
}

const escapeStars = (text: string): string => text.replaceAll('*', '\\*')

/** `0.89×, 1.16×*, –`: each round's value, * when the round was not quiet for both sides. */
export function perRoundText (ratio: Ratio, format: (v: number) => string): string {
  return (ratio.perRound ?? [])
    .map((v, i) => v === null ? '–' : `${format(v)}${ratio.perRoundQuiet?.[i] === false ? '*' : ''}`)
    .join(', ')
}

function phaseTable (report: ScenarioReport, phase: PhaseInfo): string[] {
  const baseline = report.targets.find(t => t.id === report.baselineId)?.phases[phase.id]
  const unit = phase.rateUnit ?? 'req/s'
  const perUnit = unit.replace(/\/s$/, '').replace(/s$/, '')
  const columns = phase.columns ?? []
  const blanks = '| '.repeat(10 + columns.length)
  const lines = [
    `### ${phase.label}`,
    '',
    `| target | ${unit} | × baseline | p50 | p90 | p99 | p99 − baseline | CPU µs/${perUnit}: target | app | target vCPU | target peak RSS MB | ${columns.map(c => `${c.label} | `).join('')}errors |`,
    `|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|${'---:|'.repeat(columns.length)}---|`
  ]
  for (const target of report.targets) {
    if (target.skipped !== undefined) {
      lines.push(`| ${target.label} ${blanks}| skipped: ${target.skipped} |`)
      continue
    }
    const m = target.phases[phase.id]
    const failure = target.failure === undefined ? '' : `**failed**: ${oneLine(target.failure)}`
    if (m === undefined) {
      if (failure !== '') lines.push(`| ${target.label} ${blanks}| ${failure} |`)
      continue
    }
    const isBaseline = target.id === report.baselineId
    const comparable = !isBaseline && baseline !== undefined && baseline.valid && m.valid
    const issues = problems(m)
    const status = [issues === undefined ? '0' : `**${issues}** (not a valid number)`, failure].filter(p => p !== '').join('; ')
    lines.push(`| ${target.label}${m.disturbed === true ? ' †' : ''} | ${int(m.rps)} | ${comparable ? `${(m.rps / baseline.rps).toFixed(2)}×` : '–'} | ${ms(m.p50Ms)} | ${ms(m.p90Ms)} | ${ms(m.p99Ms)} | ${comparable ? signedMs(m.p99Ms - baseline.p99Ms) : '–'} | ${int(m.cpu?.targetUsPerRequest ?? undefined)} | ${int(m.cpu?.appUsPerRequest ?? undefined)} | ${fixed(m.cpu?.targetCoresUsed ?? undefined, 2)} | ${peakRss(m)} | ${columns.map(c => `${fixed(m.extra?.[c.key], c.digits ?? 0)} | `).join('')}${status} |`)
  }
  return lines
}

function scenarioMarkdown (report: ScenarioReport, settings: BenchReport['settings']): string {
  const lines: string[] = []
  lines.push(`## ${report.name}`, '', report.description + '.', '')
  lines.push(
    `${report.method} ` +
    `Each phase ${settings.durationSeconds} s; each target warmed up ${settings.warmupSeconds} s first; ` +
    `${settings.rounds} round${settings.rounds === 1 ? '' : 's'} over all targets, interleaved; each figure is the median of the quiet rounds (see Notes). ` +
    `Baseline: ${report.targets.find(t => t.id === report.baselineId)?.label ?? report.baselineId}.`, '')
  for (const phase of report.phases) lines.push(...phaseTable(report, phase), '')
  lines.push('**Ratios** (made within each round, then the median of the rounds quiet for both sides; ' +
    '\\* marks a round disturbed by other load, left out of the median)', '')
  for (const ratio of report.ratios) {
    const format = formatOf(ratio)
    const value = ratio.value === null ? 'n/a' : format(ratio.value)
    const rounds = ratio.perRound === undefined || ratio.perRound.length < 2
      ? ''
      : ` (per round: ${escapeStars(perRoundText(ratio, format))}${ratio.disturbed === true ? ' †' : ''})`
    lines.push(`- ${ratio.label}: **${value}**${rounds}`)
  }
  lines.push('', '**Targets**', '', '| check | result | detail |', '|---|---|---|')
  for (const check of report.checks) lines.push(`| ${check.label} | **${check.status}** | ${escapeStars(check.detail)} |`)
  const notes = [...(report.notes ?? []), ...report.targets.flatMap(t => (t.notes ?? []).map(n => `${t.label}: ${n}`))]
  const combined = report.targets.flatMap(t => Object.values(t.phases))
  const disturbed = combined.filter(m => m.disturbed === true).length
  notes.push('target vCPU = CPU seconds of the target\'s own processes ÷ the phase\'s wall time (median of the rounds); ' +
    'CPU µs per request ÷ 1,000 = CPU seconds per 1,000 requests = vCPU per 1,000 req/s. ' +
    'Target peak RSS (MB = 10⁶ bytes) = the kernel\'s peak resident mark (VmHWM) of the target\'s own processes, reset at the start of each phase, the highest of the rounds' +
    (combined.some(m => m.peakRssPhaseOnly === false) ? ' (‡: the mark could not be reset, peak since the process started)' : '') + '.')
  notes.push(`other load on the machine: a round counts as quiet when the rest of the machine used ≤ ${QUIET_CORES} cores during it; ` +
    'each figure is the median of the quiet rounds of its target and phase, or of all rounds when none was quiet (marked †). ' +
    (disturbed === 0 ? 'No figure is disturbed.' : `${disturbed} of ${combined.length} figures are disturbed (†): rerun on a quiet machine.`))
  lines.push('', '**Notes**', '', ...notes.map(n => `- ${n}`))
  return lines.join('\n')
}

export function renderMarkdown (report: BenchReport): string {
  const env = report.environment
  const lines = [
    '# app-sidecar benchmark',
    '',
    `${report.date} · Node ${env.node} · ${env.cpuModel} × ${env.cpuCount} · ${env.platform} · ${env.nginx ?? 'no nginx'}`,
    '',
    'Everything on loopback; each server is its own process, measured one at a time (the app keeps running); ' +
    'the load generators (autocannon, or the bench\'s own for streams) run in the bench process on the same cores.',
    ''
  ]
  for (const scenario of report.scenarios) lines.push(scenarioMarkdown(scenario, report.settings), '')
  return lines.join('\n')
}

export function writeReport (report: BenchReport, jsonFile: string, markdownFile: string): string {
  const markdown = renderMarkdown(report)
  mkdirSync(dirname(jsonFile), { recursive: true })
  writeFileSync(jsonFile, JSON.stringify(report, null, 2) + '\n')
  writeFileSync(markdownFile, markdown)
  writeFileSync(markdownFile.replace(/\.md$/, '') + '.svg', renderChart(report))
  return markdown
}
