import { mkdirSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, release, totalmem, type as osType } from 'node:os'
import { dirname } from 'node:path'
import { QUIET_CORES } from './aggregate.ts'
import { renderChart } from './chart.ts'
import type { Measurement } from './load.ts'
import type { Evaluation, LoadPhase, Ratio, Scenario, TargetResult } from './scenario.ts'
import type { BenchSettings } from './settings.ts'

/** bench/results/latest.json: everything measured, machine-readable. */
export interface BenchReport {
  readonly schema: 1
  readonly date: string
  readonly environment: ReturnType<typeof environment>
  readonly settings: Omit<BenchSettings, 'targets'> & { targets: string[] | null }
  readonly scenarios: ScenarioReport[]
}

export type PhaseInfo = Pick<LoadPhase, 'id' | 'label' | 'rateUnit' | 'columns'>

/** The phase of a scenario's headline rate (README summary, chart): its first after any `idle` one (a call at rest has no rate to speak of). */
export function mainPhase (scenario: ScenarioReport): PhaseInfo | undefined {
  return scenario.phases.find(p => p.id !== 'idle') ?? scenario.phases[0]
}

/** A scenario's part of latest.json: its description, phases, results, ratios and checks. */
export interface ScenarioReport extends Pick<Scenario, 'name' | 'description' | 'baselineId'>, Evaluation {
  /** How the targets were loaded (settings included). */
  readonly method: string
  readonly phases: PhaseInfo[]
  readonly targets: TargetResult[]
}

/** The machine the bench ran on, for the report's header. */
export function environment (nginx: string | null) {
  const cpuList = cpus()
  return {
    node: process.version, platform: `${osType()} ${release()} ${process.arch}`, cpuModel: cpuList[0]?.model.trim() ?? 'unknown', cpuCount: cpuList.length,
    memoryGiB: Math.round(totalmem() / 1024 ** 3 * 10) / 10, loadAverageAtStart: loadavg().map(v => Math.round(v * 100) / 100), nginx
  }
}

/** The ScenarioReport of a scenario's results and evaluation. */
export function scenarioReport (scenario: Scenario, targets: TargetResult[], evaluation: Evaluation, settings: BenchSettings): ScenarioReport {
  const { name, description, baselineId } = scenario
  const { ratios, checks, notes } = evaluation
  return {
    name, description, method: scenario.method(settings), baselineId,
    phases: scenario.phases.map(({ id, label, rateUnit, columns }) => ({ id, label, rateUnit, columns })),
    targets, ratios, checks, ...(notes === undefined ? {} : { notes })
  }
}

const oneLine = (text: string): string => {
  const flat = text.replace(/\s*\n\s*/g, ' ').replaceAll('|', '\\|')
  return flat.length > 200 ? flat.slice(0, 199) + '…' : flat
}
/** `n` formatted, `–` when there is none (JSON turns NaN into null). */
const orDash = (n: number | null | undefined, format: (n: number) => string): string => typeof n === 'number' && Number.isFinite(n) ? format(n) : '–'
/** A whole number with thousands separators (`12,345`), `–` when there is none. */
export const int = (n: number | undefined): string => orDash(n, v => Math.round(v).toLocaleString('en-US'))
const fixed = (n: number | null | undefined, digits: number): string =>
  orDash(n, v => v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }))
const ms = (n: number): string => orDash(n, v => v.toFixed(2))
const signedMs = (n: number): string => `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(2)}`

function problems (m: Measurement): string {
  const codes = Object.entries(m.statusCodes).filter(([code]) => !code.startsWith('2')).map(([code, n]) => `${n}×${code}`)
  return [m.errors > 0 && `${m.errors} errors`, m.timeouts > 0 && `${m.timeouts} timeouts`,
    m.non2xx > 0 && `non-2xx: ${codes.join(', ')}`, m.ok === 0 && 'no 2xx response'].filter(p => p !== false).join(', ')
}

/** How a ratio's values read: `1.23×`, `45.6%`, `1,234 req/s`, `+0.12 ms`, `0.052 vCPU`, `61.2 MB`, `1,651 B`, `7.00 per run`. */
export function formatOf (ratio: Ratio): (v: number) => string {
  switch (ratio.unit) {
    case '×': return v => `${v.toFixed(2)}×`
    case '%': return v => `${(v * 100).toFixed(1)}%`
    case 'req/s': return v => `${int(v)} req/s`
    case 'vCPU': return v => `${v.toFixed(3)} vCPU`
    case 'MB': return v => `${v.toFixed(1)} MB`
    case 'B': return v => `${int(v)} B`
    case '/run': return v => `${v.toFixed(2)} per run`
    case 'µs': return v => `${int(v)} µs`
    case '/s': return v => `${v.toFixed(3)}/s`
    case 'ms': return v => `${signedMs(v)} ms`
  }
}

const escapeStars = (text: string): string => text.replaceAll('*', '\\*')

/** `0.89×, 1.16×*, –`: each round's value, * when the round was not quiet for both sides. */
export function perRoundText (ratio: Ratio, format: (v: number) => string): string {
  return (ratio.perRound ?? []).map((v, i) => v === null ? '–' : `${format(v)}${ratio.perRoundQuiet?.[i] === false ? '*' : ''}`).join(', ')
}

/** One phase's table: a row per target, figures against the baseline's, the scenario's extra columns, and what went wrong. */
function phaseTable (report: ScenarioReport, phase: PhaseInfo): string[] {
  const baseline = report.targets.find(t => t.id === report.baselineId)?.phases[phase.id]
  const unit = phase.rateUnit ?? 'req/s'
  const columns = phase.columns ?? []
  const blanks = '| '.repeat(10 + columns.length)
  const lines = [
    `### ${phase.label}`,
    '',
    `| target | ${unit} | × baseline | p50 | p90 | p99 | p99 − baseline | CPU µs/${unit.replace(/\/s$/, '').replace(/s$/, '')}: target | app | target vCPU | target peak RSS MB | ${columns.map(c => `${c.label} | `).join('')}errors |`,
    `|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|${'---:|'.repeat(columns.length)}---|`
  ]
  for (const target of report.targets) {
    const m = target.phases[phase.id]
    const failure = target.failure === undefined ? '' : `**failed**: ${oneLine(target.failure)}`
    if (target.skipped !== undefined) lines.push(`| ${target.label} ${blanks}| skipped: ${target.skipped} |`)
    else if (m === undefined) { if (failure !== '') lines.push(`| ${target.label} ${blanks}| ${failure} |`) } else {
      const comparable = target.id !== report.baselineId && baseline !== undefined && baseline.valid && m.valid
      const status = [m.valid ? '0' : `**${problems(m)}** (not a valid number)`, failure].filter(p => p !== '').join('; ')
      const cells = [`${target.label}${m.disturbed === true ? ' †' : ''}`, int(m.rps), comparable ? `${(m.rps / baseline.rps).toFixed(2)}×` : '–',
        ms(m.p50Ms), ms(m.p90Ms), ms(m.p99Ms), comparable ? signedMs(m.p99Ms - baseline.p99Ms) : '–',
        int(m.cpu?.targetUsPerRequest ?? undefined), int(m.cpu?.appUsPerRequest ?? undefined), fixed(m.cpu?.targetCoresUsed, 2),
        m.peakRssMb === undefined ? '–' : `${m.peakRssMb.toFixed(1)}${m.peakRssPhaseOnly === false ? ' ‡' : ''}`,
        ...columns.map(c => fixed(m.extra?.[c.key], c.digits ?? 0)), status]
      lines.push(`| ${cells.join(' | ')} |`)
    }
  }
  return lines
}

/** A scenario's section of latest.md: method, a table per phase, ratios, checks and notes. */
function scenarioMarkdown (report: ScenarioReport, settings: BenchReport['settings']): string {
  const lines = [`## ${report.name}`, '', report.description + '.', '',
    `${report.method} ` +
    `Each phase ${settings.durationSeconds} s; each target warmed up ${settings.warmupSeconds} s first; ` +
    `${settings.rounds} round${settings.rounds === 1 ? '' : 's'} over all targets, interleaved; each figure is the median of the quiet rounds (see Notes). ` +
    `Baseline: ${report.targets.find(t => t.id === report.baselineId)?.label ?? report.baselineId}.`, '']
  for (const phase of report.phases) lines.push(...phaseTable(report, phase), '')
  lines.push('**Ratios** (made within each round, then the median of the rounds quiet for both sides; ' +
    '\\* marks a round disturbed by other load, left out of the median)', '')
  for (const ratio of report.ratios) {
    const format = formatOf(ratio)
    const rounds = (ratio.perRound?.length ?? 0) < 2 ? '' : ` (per round: ${escapeStars(perRoundText(ratio, format))}${ratio.disturbed === true ? ' †' : ''})`
    lines.push(`- ${ratio.label}: **${ratio.value === null ? 'n/a' : format(ratio.value)}**${rounds}`)
  }
  lines.push('', '**Targets**', '', '| check | result | detail |', '|---|---|---|')
  for (const check of report.checks) lines.push(`| ${check.label} | **${check.status}** | ${escapeStars(check.detail)} |`)
  const combined = report.targets.flatMap(t => Object.values(t.phases))
  const disturbed = combined.filter(m => m.disturbed === true).length
  const notes = [...(report.notes ?? []), ...report.targets.flatMap(t => (t.notes ?? []).map(n => `${t.label}: ${n}`)),
    'target vCPU = CPU seconds of the target\'s own processes ÷ the phase\'s wall time (median of the rounds); ' +
    'CPU µs per request ÷ 1,000 = CPU seconds per 1,000 requests = vCPU per 1,000 req/s. ' +
    'Target peak RSS (MB = 10⁶ bytes) = the kernel\'s peak resident mark (VmHWM) of the target\'s own processes, reset at the start of each phase, the highest of the rounds' +
    (combined.some(m => m.peakRssPhaseOnly === false) ? ' (‡: the mark could not be reset, peak since the process started)' : '') + '.',
    `other load on the machine: a round counts as quiet when the rest of the machine used ≤ ${QUIET_CORES} cores during it; ` +
    'each figure is the median of the quiet rounds of its target and phase, or of all rounds when none was quiet (marked †). ' +
    (disturbed === 0 ? 'No figure is disturbed.' : `${disturbed} of ${combined.length} figures are disturbed (†): rerun on a quiet machine.`)]
  lines.push('', '**Notes**', '', ...notes.map(n => `- ${n}`))
  return lines.join('\n')
}

const cell = (text: string): string => text.replace(/\s*\n\s*/g, ' ').replaceAll('|', '\\|').replaceAll('*', '\\*')
/** A check's figure without its margin (`0.93× (per round: …)`), or its whole detail when it has none. */
const measured = (detail: string): string => detail.split('; margin ')[0] ?? detail

/** Every target of the run in one table, met or not, with its figure (the scenarios' sections give the margins). */
function targetList (report: BenchReport): string[] {
  const checks = report.scenarios.flatMap(s => s.checks)
  return ['## Targets', '',
    `${checks.filter(c => c.status === 'PASS').length} of ${checks.length} met. Each figure is the median of the rounds; ` +
    'each scenario\'s section below has its tables, ratios and margins.', '',
    '| scenario | target | result | measured |',
    '|---|---|---|---|',
    ...report.scenarios.flatMap(s => s.checks.map(c => `| ${s.name} | ${cell(c.label)} | ${c.status} | ${cell(measured(c.detail))} |`))]
}

/** latest.md: a header on the machine, every target of the run, then every scenario's section. */
export function renderMarkdown (report: BenchReport): string {
  const env = report.environment
  return ['# app-sidecar benchmark', '',
    `${report.date} · Node ${env.node} · ${env.cpuModel} × ${env.cpuCount} · ${env.platform} · ${env.nginx ?? 'no nginx'}`,
    '',
    'Everything on loopback; each server is its own process, measured one at a time (the app keeps running); ' +
    'the load generators (autocannon, or the bench\'s own for streams) run in the bench process on the same cores.',
    '',
    ...targetList(report),
    '',
    ...report.scenarios.flatMap(scenario => [scenarioMarkdown(scenario, report.settings), ''])
  ].join('\n')
}

/** Writes latest.json, latest.md and the chart (latest.svg) beside it; returns the Markdown. */
export function writeReport (report: BenchReport, jsonFile: string, markdownFile: string): string {
  const markdown = renderMarkdown(report)
  mkdirSync(dirname(jsonFile), { recursive: true })
  writeFileSync(jsonFile, JSON.stringify(report, null, 2) + '\n')
  writeFileSync(markdownFile, markdown)
  writeFileSync(markdownFile.replace(/\.md$/, '') + '.svg', renderChart(report))
  return markdown
}
