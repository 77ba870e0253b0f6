import type { Measurement } from './load.ts'
import type { BenchReport, PhaseInfo, ScenarioReport } from './report.ts'
import type { TargetResult } from './scenario.ts'

// An SVG chart of a bench report (bench/results/latest.svg): one panel per scenario, a bar per
// target for the first phase's rate and a smaller group for p99 latency. Self-contained (no
// fonts, scripts or links) and on an opaque white background, so it reads on GitHub in dark mode too.

const WIDTH = 900
const MARGIN = 12
const PAD = 16
const LABEL_WIDTH = 290
const INNER_LEFT = MARGIN + PAD
const INNER_RIGHT = WIDTH - MARGIN - PAD
const BAR_X = INNER_LEFT + LABEL_WIDTH + 8
const FONT = 'system-ui, -apple-system, \'Segoe UI\', Roboto, \'Helvetica Neue\', Arial, sans-serif'

const COLOR = {
  text: '#1f2328',
  muted: '#59636e',
  rule: '#d1d9e0',
  panel: '#f6f8fa',
  rate: '#2f6fd0',
  latency: '#d9822b',
  baseline: '#8c959f',
  invalid: '#cf222e'
}

/** A latency phase must run well below the main phase's rate to be the one whose p99 is shown. */
const LATENCY_PHASE_MAX_RATE_SHARE = 0.9

export function renderChart (report: BenchReport): string {
  const env = report.environment
  const body: string[] = []
  let y = MARGIN + 26
  body.push(text(INNER_LEFT - PAD / 2, y, 'app-sidecar benchmark', { size: 20, weight: 'bold' }))
  body.push(...legend(y))
  y += 22
  body.push(text(INNER_LEFT - PAD / 2, y, `${formatDate(report.date)} · Node ${env.node} · ${env.cpuModel} × ${env.cpuCount}`, { size: 13, fill: COLOR.muted }))
  y += 16

  let disturbed = false
  let peakSinceStart = false
  for (const scenario of report.scenarios) {
    const panel = scenarioPanel(scenario, y)
    body.push(...panel.svg)
    y = panel.bottom + 12
    disturbed ||= panel.disturbed
    peakSinceStart ||= panel.peakSinceStart
  }

  const rounds = report.settings.rounds
  const footnotes = [
    `Each figure: the median of the quiet rounds (${rounds} round${rounds === 1 ? '' : 's'} of ${report.settings.durationSeconds} s per phase). Bars of a group share one scale; tables and checks in latest.md.`,
    ...(disturbed ? ['† no round of that phase was quiet: the figure is disturbed by other load on the machine.'] : []),
    ...(peakSinceStart ? ['‡ peak RSS since the process started (the mark could not be reset for the phase).'] : [])
  ]
  for (const note of footnotes) {
    y += 4
    for (const line of wrap(note, INNER_RIGHT - INNER_LEFT + PAD, 11, 2)) {
      y += 14
      body.push(text(INNER_LEFT - PAD / 2, y, line, { size: 11, fill: COLOR.muted }))
    }
  }
  const height = Math.ceil(y + MARGIN + 4)
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="${escapeXml(FONT)}" fill="${COLOR.text}">`,
    `<title>${escapeXml(`app-sidecar benchmark, ${report.date}`)}</title>`,
    `<rect x="0" y="0" width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    ...body,
    '</svg>',
    ''
  ].join('\n')
}

interface Panel { svg: string[], bottom: number, disturbed: boolean, peakSinceStart: boolean }

/** One row of a bar group: a bar (value ≥ 0) or a gap with a word (skipped, failed, not run). */
interface Row {
  label: string
  detail?: string
  isBaseline: boolean
  value?: number
  invalid?: string
  gap?: string
  /** After the value, e.g. `0.94× baseline`. */
  note?: string
}

function scenarioPanel (scenario: ScenarioReport, top: number): Panel {
  const svg: string[] = []
  let y = top + PAD + 14
  svg.push(text(INNER_LEFT, y, scenario.name, { size: 16, weight: 'bold' }))
  for (const line of wrap(scenario.description, INNER_RIGHT - INNER_LEFT, 12, 2)) {
    y += 17
    svg.push(text(INNER_LEFT, y, line, { size: 12, fill: COLOR.muted }))
  }
  let disturbed = false
  let peakSinceStart = false
  const main = scenario.phases[0]
  if (main === undefined) {
    y += 20
    svg.push(text(INNER_LEFT, y, 'no phase measured', { size: 12, fill: COLOR.muted }))
  } else {
    const unit = main.rateUnit ?? 'req/s'
    const baseline = measurementOf(scenario, scenario.baselineId, main.id)
    const rateRows = scenario.targets.map(target => {
      const m = target.phases[main.id]
      const row = baseRow(scenario, target, m)
      if (m === undefined) return row
      // JSON turns a NaN median into null
      if (!isNumber(m.rps)) return { ...row, gap: 'no figure' }
      disturbed ||= m.disturbed === true
      peakSinceStart ||= m.peakRssMb !== undefined && m.peakRssPhaseOnly === false
      const comparable = !row.isBaseline && baseline?.valid === true && isNumber(baseline.rps) && baseline.rps > 0 && m.valid
      const resources = resourceText(m)
      return {
        ...row,
        ...(resources === undefined ? {} : { detail: resources }),
        value: m.rps,
        note: `${formatRate(m.rps)} ${unit}${row.isBaseline ? ' · baseline' : comparable ? ` · ${(m.rps / baseline.rps).toFixed(2)}× baseline` : ''}`
      }
    })
    y += 28
    svg.push(heading(y, `${main.label} · ${unit}`, 13, 'higher is better'))
    y += 8
    const rate = barGroup(rateRows, y, { color: COLOR.rate, rowHeight: rateRows.some(r => r.detail !== undefined) ? 38 : 28, barHeight: 18, size: 13 })
    svg.push(...rate.svg)
    y = rate.bottom

    const latencyPhase = pickLatencyPhase(scenario, main)
    const latencyBaseline = measurementOf(scenario, scenario.baselineId, latencyPhase.id)
    const latencyRows = scenario.targets.map(target => {
      const m = target.phases[latencyPhase.id]
      const row = baseRow(scenario, target, m)
      if (m === undefined || !isNumber(m.p99Ms)) return m === undefined ? row : { ...row, gap: 'no latency' }
      if (latencyPhase !== main) disturbed ||= m.disturbed === true
      const comparable = !row.isBaseline && latencyBaseline?.valid === true && isNumber(latencyBaseline.p99Ms) && m.valid
      return {
        ...row,
        value: m.p99Ms,
        note: `${formatMs(m.p99Ms)} ms${row.isBaseline ? ' · baseline' : comparable ? ` · ${signedMs(m.p99Ms - latencyBaseline.p99Ms)} ms vs baseline` : ''}`
      }
    })
    if (latencyRows.some(r => r.value !== undefined)) {
      y += 22
      svg.push(heading(y, `p99 latency, ${latencyPhase.label} · ms`, 12, 'lower is better'))
      y += 6
      const latency = barGroup(latencyRows, y, { color: COLOR.latency, rowHeight: 20, barHeight: 11, size: 11 })
      svg.push(...latency.svg)
      y = latency.bottom
    }
  }
  const bottom = y + PAD - 4
  svg.unshift(`<rect x="${MARGIN}" y="${top}" width="${WIDTH - 2 * MARGIN}" height="${bottom - top}" rx="6" fill="${COLOR.panel}" stroke="${COLOR.rule}"/>`)
  return { svg, bottom, disturbed, peakSinceStart }
}

/** The row of a target before its value: its label, and the gap when there is no measurement. */
function baseRow (scenario: ScenarioReport, target: TargetResult, m: Measurement | undefined): Row {
  const row: Row = { label: `${target.label}${m?.disturbed === true ? ' †' : ''}`, isBaseline: target.id === scenario.baselineId }
  if (target.skipped !== undefined) return { ...row, gap: `skipped: ${target.skipped}` }
  if (m === undefined) return { ...row, gap: target.failure === undefined ? 'not run' : `failed: ${oneLine(target.failure)}` }
  if (!m.valid) return { ...row, invalid: `invalid: ${problems(m)}` }
  return row
}

/**
 * The phase whose p99 is shown: the last later phase run well below the main phase's rate (a
 * fixed-rate or paced phase: the latency a caller sees), else the main phase itself.
 */
function pickLatencyPhase (scenario: ScenarioReport, main: PhaseInfo): PhaseInfo {
  const rateOf = (phase: PhaseInfo): number => {
    const baseline = measurementOf(scenario, scenario.baselineId, phase.id)
    if (baseline !== undefined && baseline.valid && isNumber(baseline.rps)) return baseline.rps
    return Math.max(0, ...scenario.targets.map(t => t.phases[phase.id]).filter(m => m?.valid === true && isNumber(m.rps)).map(m => (m as Measurement).rps))
  }
  const mainRate = rateOf(main)
  const slower = scenario.phases.slice(1).filter(phase => {
    const rate = rateOf(phase)
    return rate > 0 && rate < mainRate * LATENCY_PHASE_MAX_RATE_SHARE
  })
  // an evenly paced phase is what a caller sees at a steady rate: the latency to show when there is one
  return slower.find(phase => phase.id === 'paced') ?? slower.at(-1) ?? main
}

function barGroup (rows: Row[], top: number, style: { color: string, rowHeight: number, barHeight: number, size: number }): { svg: string[], bottom: number } {
  const svg: string[] = []
  const noteSize = style.size - 1
  const notes = rows.map(r => r.invalid === undefined ? r.note ?? '' : `${r.note ?? ''} · ${r.invalid}`)
  const widest = Math.max(0, ...rows.map((r, i) => r.value === undefined ? 0 : textWidth(notes[i] ?? '', noteSize, false)))
  const maxBar = Math.max(60, INNER_RIGHT - BAR_X - 8 - widest)
  const maxValue = Math.max(0, ...rows.map(r => r.value ?? 0))
  const scale = maxValue > 0 ? maxBar / maxValue : 0
  svg.push(`<line x1="${BAR_X}" y1="${top}" x2="${BAR_X}" y2="${top + rows.length * style.rowHeight}" stroke="${COLOR.rule}"/>`)
  rows.forEach((row, i) => {
    const rowTop = top + i * style.rowHeight
    const barY = rowTop + (style.rowHeight - style.barHeight) / 2
    const middle = barY + style.barHeight / 2 + style.size * 0.35
    const labelY = row.detail === undefined ? middle : middle - 7
    svg.push(text(INNER_LEFT, labelY, fit(row.label, LABEL_WIDTH, style.size, row.isBaseline), { size: style.size, ...(row.isBaseline ? { weight: 'bold' } : {}) }))
    if (row.detail !== undefined) svg.push(text(INNER_LEFT, labelY + 15, fit(row.detail, LABEL_WIDTH, 11, false), { size: 11, fill: COLOR.muted }))
    if (row.value === undefined) {
      const gap = fit(row.gap ?? '', INNER_RIGHT - BAR_X - 12, noteSize, false)
      svg.push(`<rect x="${BAR_X}" y="${barY}" width="${INNER_RIGHT - BAR_X}" height="${style.barHeight}" fill="none" stroke="${COLOR.rule}" stroke-dasharray="4 3"/>`)
      svg.push(text(BAR_X + 8, barY + style.barHeight / 2 + noteSize * 0.35, gap, { size: noteSize, fill: COLOR.muted, style: 'italic' }))
      return
    }
    const width = row.value > 0 ? Math.max(1, row.value * scale) : 0
    const fill = row.invalid !== undefined ? 'none' : row.isBaseline ? COLOR.baseline : style.color
    const stroke = row.invalid !== undefined ? ` stroke="${COLOR.invalid}" stroke-dasharray="4 2"` : ''
    svg.push(`<rect x="${BAR_X}" y="${barY}" width="${round(width)}" height="${style.barHeight}" rx="2" fill="${fill}"${stroke}/>`)
    svg.push(text(BAR_X + width + 6, barY + style.barHeight / 2 + noteSize * 0.35, notes[i] ?? '', { size: noteSize, ...(row.invalid === undefined ? {} : { fill: COLOR.invalid }) }))
  })
  return { svg, bottom: top + rows.length * style.rowHeight }
}

/** A bold group title and, in small grey after it, how to read it. */
function heading (y: number, title: string, size: number, hint: string): string {
  const fitted = fit(title, INNER_RIGHT - INNER_LEFT - textWidth(hint, 11, false) - 12, size, true)
  return `<text x="${INNER_LEFT}" y="${round(y)}" font-size="${size}" font-weight="bold">${escapeXml(fitted)}<tspan dx="8" font-size="11" font-weight="normal" fill="${COLOR.muted}">${escapeXml(hint)}</tspan></text>`
}

function legend (baselineY: number): string[] {
  const items: Array<[string, string]> = [[COLOR.baseline, 'baseline'], [COLOR.rate, 'rate'], [COLOR.latency, 'p99 latency']]
  const svg: string[] = []
  let x = INNER_RIGHT + PAD / 2
  for (const [color, label] of items.reverse()) {
    x -= textWidth(label, 12, false)
    svg.push(text(x, baselineY - 4, label, { size: 12, fill: COLOR.muted }))
    x -= 16
    svg.push(`<rect x="${round(x)}" y="${baselineY - 14}" width="12" height="12" rx="2" fill="${color}"/>`)
    x -= 14
  }
  return svg
}

/** `62 MB · 0.42 vCPU`: the target's own processes during the phase, when measured. */
function resourceText (m: Measurement): string | undefined {
  const parts: string[] = []
  if (isNumber(m.peakRssMb)) parts.push(`${m.peakRssMb.toFixed(m.peakRssMb < 10 ? 1 : 0)} MB${m.peakRssPhaseOnly === false ? ' ‡' : ''}`)
  const cores = m.cpu?.targetCoresUsed
  if (isNumber(cores)) parts.push(`${cores.toFixed(2)} vCPU`)
  return parts.length === 0 ? undefined : parts.join(' · ')
}

function problems (m: Measurement): string {
  const parts: string[] = []
  if (m.errors > 0) parts.push(`${m.errors} errors`)
  if (m.timeouts > 0) parts.push(`${m.timeouts} timeouts`)
  if (m.non2xx > 0) parts.push(`${m.non2xx} non-2xx`)
  if (m.ok === 0) parts.push('no 2xx')
  return parts.length === 0 ? 'see latest.md' : parts.join(', ')
}

const measurementOf = (scenario: ScenarioReport, targetId: string, phaseId: string): Measurement | undefined =>
  scenario.targets.find(t => t.id === targetId)?.phases[phaseId]

const isNumber = (n: unknown): n is number => typeof n === 'number' && Number.isFinite(n)
const round = (n: number): number => Math.round(n * 10) / 10
const oneLine = (s: string): string => s.replace(/\s+/g, ' ').trim()
const formatRate = (n: number): string => n.toLocaleString('en-US', { maximumFractionDigits: n < 10 ? 1 : 0 })
const formatMs = (n: number): string => n < 100 ? n.toFixed(2) : Math.round(n).toLocaleString('en-US')
const signedMs = (n: number): string => `${n >= 0 ? '+' : '−'}${formatMs(Math.abs(n))}`

function formatDate (iso: string): string {
  const match = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})/.exec(iso)
  return match === null ? iso : `${match[1]} ${match[2]} UTC`
}

function escapeXml (s: string): string {
  return s.replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', '\'': '&apos;' })[c] as string)
}

function text (x: number, y: number, content: string, style: { size: number, weight?: 'bold', fill?: string, style?: 'italic' }): string {
  const attributes = [
    `x="${round(x)}"`, `y="${round(y)}"`, `font-size="${style.size}"`,
    ...(style.weight === undefined ? [] : [`font-weight="${style.weight}"`]),
    ...(style.style === undefined ? [] : [`font-style="${style.style}"`]),
    ...(style.fill === undefined ? [] : [`fill="${style.fill}"`])
  ]
  return `<text ${attributes.join(' ')}>${escapeXml(content)}</text>`
}

/**
 * A generous estimate of a text's width in px (per-character classes sized on DejaVu Sans, wider
 * than most system fonts): the chart can't measure text, and an overestimate only leaves room.
 */
function textWidth (s: string, size: number, bold: boolean): number {
  let em = 0
  for (const c of s) {
    if (/[il.,:;'!|·]/.test(c)) em += 0.32
    else if (c === '_') em += 0.5
    else if (/[fjrt()[\] ]/.test(c)) em += 0.4
    else if (/[mwMW@%]/.test(c)) em += 0.92
    else if (/[A-Z]/.test(c)) em += 0.72
    else em += 0.62
  }
  return em * size * (bold ? 1.08 : 1)
}

/** `s`, cut with an ellipsis to fit `width` px. */
function fit (s: string, width: number, size: number, bold: boolean): string {
  if (textWidth(s, size, bold) <= width) return s
  const chars = [...s]
  while (chars.length > 0 && textWidth(chars.join('') + '…', size, bold) > width) chars.pop()
  return chars.join('').trimEnd() + '…'
}

/** Words into at most `maxLines` lines of `width` px; the last one cut with an ellipsis. */
function wrap (s: string, width: number, size: number, maxLines: number): string[] {
  const lines: string[] = []
  let current = ''
  for (const word of oneLine(s).split(' ')) {
    const candidate = current === '' ? word : `${current} ${word}`
    if (current === '' || textWidth(candidate, size, false) <= width) current = candidate
    else { lines.push(current); current = word }
  }
  if (current !== '') lines.push(current)
  if (lines.length <= maxLines) return lines
  const kept = lines.slice(0, maxLines)
  kept[maxLines - 1] = fit(lines.slice(maxLines - 1).join(' '), width, size, false)
  return kept
}
