import type { Measurement } from './load.ts'
import { type BenchReport, mainPhase, type ScenarioReport } from './report.ts'

// bench/results/latest.svg: per scenario, a bar per target for its rate in the main phase and one
// for its p99 (in the evenly paced phase when there is one: the latency a caller sees at a steady
// rate). Plain SVG on white (no fonts, scripts or links): it reads on GitHub in dark mode too.

const WIDTH = 900
const LEFT = 20
const BAR_X = 300
const BAR_MAX = 360
const COLOR = { muted: '#59636e', rate: '#2f6fd0', latency: '#d9822b', baseline: '#8c959f', invalid: '#cf222e' }

const isNumber = (n: unknown): n is number => typeof n === 'number' && Number.isFinite(n)
const cut = (s: string, length: number): string => { const flat = s.replace(/\s+/g, ' ').trim(); return flat.length > length ? `${flat.slice(0, length - 1)}…` : flat }
const escapeXml = (s: string): string => s.replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`)
const text = (x: number, y: number, content: string, style = ''): string => `<text x="${Math.round(x)}" y="${y}"${style}>${escapeXml(content)}</text>`
const muted = ` font-size="12" fill="${COLOR.muted}"`

interface Group {
  heading: string
  color: string
  figure: (m: Measurement) => number
  /** The figure as written after its bar. */
  show: (value: number) => string
  /** The figure against the baseline's (`· 0.94× baseline`), when both are valid. */
  versus: (m: Measurement, baseline: Measurement) => string
}

/** One group of bars: a heading, then a row per target (a bar, or why there is none) on the group's own scale. */
function barGroup (svg: string[], y: number, scenario: ScenarioReport, phaseId: string, { heading, color, figure, show, versus }: Group): number {
  svg.push(text(LEFT, y += 26, heading, ' font-size="13" font-weight="bold"'))
  const baseline = scenario.targets.find(t => t.id === scenario.baselineId)?.phases[phaseId]
  const max = Math.max(0, ...scenario.targets.map(t => t.phases[phaseId]).filter(m => m !== undefined).map(figure).filter(isNumber))
  for (const target of scenario.targets) {
    const m = target.phases[phaseId]
    const isBaseline = target.id === scenario.baselineId
    svg.push(text(LEFT, y += 20, cut(`${target.label}${m?.disturbed === true ? ' †' : ''}`, 44), ` font-size="12"${isBaseline ? ' font-weight="bold"' : ''}`))
    const value = m === undefined ? undefined : figure(m)
    if (target.skipped !== undefined || m === undefined || !isNumber(value)) {
      const why = target.skipped !== undefined ? `skipped: ${target.skipped}` : target.failure !== undefined ? `failed: ${target.failure}` : m === undefined ? 'not run' : 'no figure'
      svg.push(text(BAR_X, y, cut(why, 90), `${muted} font-style="italic"`))
      continue
    }
    const width = max > 0 ? Math.max(1, value / max * BAR_MAX) : 0
    const paint = m.valid ? `fill="${isBaseline ? COLOR.baseline : color}"` : `fill="none" stroke="${COLOR.invalid}" stroke-dasharray="4 2"`
    svg.push(`<rect x="${BAR_X}" y="${y - 11}" width="${width.toFixed(1)}" height="13" rx="2" ${paint}/>`)
    const comparison = isBaseline ? ' · baseline' : baseline?.valid === true && m.valid ? versus(m, baseline) : ''
    svg.push(text(BAR_X + width + 6, y, `${show(value)}${comparison}${m.valid ? '' : ' · invalid'}`, ` font-size="11"${m.valid ? '' : ` fill="${COLOR.invalid}"`}`))
  }
  return y
}

/** The chart of a report (see above); the tables, checks and every other figure are in latest.md. */
export function renderChart (report: BenchReport): string {
  const env = report.environment
  const settings = report.settings
  const svg = [text(LEFT, 32, 'app-sidecar benchmark', ' font-size="20" font-weight="bold"'),
    text(LEFT, 54, `${report.date.slice(0, 16).replace('T', ' ')} UTC · Node ${env.node} · ${env.cpuModel} × ${env.cpuCount} · ` +
      `median of the quiet rounds (${settings.rounds} × ${settings.durationSeconds} s); † no quiet round; tables in latest.md`, muted)]
  let y = 54
  for (const scenario of report.scenarios) {
    svg.push(`<line x1="${LEFT}" y1="${y += 18}" x2="${WIDTH - LEFT}" y2="${y}" stroke="#d1d9e0"/>`)
    svg.push(text(LEFT, y += 24, scenario.name, ' font-size="16" font-weight="bold"'), text(LEFT, y += 18, cut(scenario.description, 125), muted))
    const main = mainPhase(scenario)
    if (main === undefined) continue
    const unit = main.rateUnit ?? 'req/s'
    y = barGroup(svg, y, scenario, main.id, {
      heading: `${main.label} · ${unit} (higher is better)`,
      color: COLOR.rate,
      figure: m => m.rps,
      show: v => `${v.toLocaleString('en-US', { maximumFractionDigits: v < 10 ? 1 : 0 })} ${unit}`,
      versus: (m, b) => isNumber(b.rps) && b.rps > 0 ? ` · ${(m.rps / b.rps).toFixed(2)}× baseline` : ''
    })
    const paced = scenario.phases.find(p => p.id === 'paced') ?? main
    y = barGroup(svg, y, scenario, paced.id, {
      heading: `p99 latency, ${paced.label} · ms (lower is better)`,
      color: COLOR.latency,
      figure: m => m.p99Ms,
      show: v => `${v.toFixed(2)} ms`,
      versus: (m, b) => isNumber(b.p99Ms) ? ` · ${m.p99Ms >= b.p99Ms ? '+' : '−'}${Math.abs(m.p99Ms - b.p99Ms).toFixed(2)} ms vs baseline` : ''
    })
  }
  const height = y + 24
  return ['<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="system-ui, sans-serif" fill="#1f2328">`,
    `<title>${escapeXml(`app-sidecar benchmark, ${report.date}`)}</title>`, `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`, ...svg, '</svg>', ''].join('\n')
}
