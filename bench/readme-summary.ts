import { readFileSync, writeFileSync } from 'node:fs'
import type { Measurement } from './load.ts'
import { type BenchReport, int } from './report.ts'

// The README shows the last run's headline figures between two markers, so they are always
// current; every target, met or not, is listed in latest.md.
export const SUMMARY_START = '<!-- bench-summary:start (written by npm run bench from bench/results/latest.json; edits here are overwritten) -->'
export const SUMMARY_END = '<!-- bench-summary:end -->'

/** The columns: the sidecar as shipped and its peers, by their target id in every scenario. */
const PEERS = [
  { id: 'sidecar', label: 'sidecar' },
  { id: 'floor', label: 'the Node floor' },
  { id: 'http-proxy', label: 'bare http-proxy' },
  { id: 'direct', label: 'app direct' }
] as const

/** One row: a figure of one phase of one scenario, for each peer measured there. */
interface Headline {
  readonly label: string
  readonly scenario: string
  readonly phase: string
  readonly figure: (m: Measurement) => string | undefined
}

const mb = (n: number | undefined): string | undefined => n === undefined ? undefined : `${n.toFixed(1)} MB`

const HEADLINES: readonly Headline[] = [
  { label: 'JSON POST, requests/s (50 connections)', scenario: 'json-post', phase: 'throughput', figure: m => int(m.rps) },
  { label: 'JSON POST, CPU µs per request (the proxy alone)', scenario: 'json-post', phase: 'throughput', figure: m => m.cpu?.targetUsPerRequest == null ? undefined : int(m.cpu.targetUsPerRequest) },
  { label: 'JSON POST, p99 at an evenly paced 1,000 req/s', scenario: 'json-post', phase: 'paced', figure: m => `${m.p99Ms.toFixed(2)} ms` },
  { label: 'memory idle (RSS, as started)', scenario: 'json-post', phase: 'idle', figure: m => mb(m.peakRssMb) },
  { label: 'memory, 1,000 busy connections (peak RSS)', scenario: 'json-post', phase: 'many', figure: m => mb(m.peakRssMb) },
  { label: 'SSE, events/s (100 NDJSON streams)', scenario: 'sse', phase: 'throughput', figure: m => int(m.rps) },
  { label: 'WebSocket echo, messages/s', scenario: 'websocket', phase: 'throughput', figure: m => int(m.rps) }
]

/** A peer's figure in a row: `–` when it was not measured there, or not validly. */
function cellOf (report: BenchReport, row: Headline, peer: string): string {
  const m = report.scenarios.find(s => s.name === row.scenario)?.targets.find(t => t.id === peer)?.phases[row.phase]
  return m === undefined || !m.valid ? '–' : row.figure(m) ?? '–'
}

/**
 * The README's short form of a bench report: the headline figures of the sidecar as shipped
 * against its peers (the Node floor, a bare http-proxy, the app called directly), and how many
 * targets were met; every target, table and profile stays in latest.md.
 */
export function renderSummary (report: BenchReport): string {
  const env = report.environment
  const checks = report.scenarios.flatMap(s => s.checks)
  const met = checks.filter(c => c.status === 'PASS').length
  return [
    `Last run: ${report.date.slice(0, 10)}, Node ${env.node}, ${env.cpuModel} × ${env.cpuCount}, every process on one machine over loopback; ` +
    `each figure the median of ${report.settings.rounds} round${report.settings.rounds === 1 ? '' : 's'} of ${report.settings.durationSeconds} s. ` +
    'The sidecar as shipped (cortex envelope, auth on, `LOG_LEVEL=info`) against the Node floor (undici `Pool.dispatch`, ' +
    'no features), a bare http-proxy, and the app called directly:',
    '',
    `| figure | ${PEERS.map(p => p.label).join(' | ')} |`,
    `|---|${PEERS.map(() => '---:').join('|')}|`,
    ...HEADLINES.map(row => `| ${row.label} | ${PEERS.map(p => cellOf(report, row, p.id)).join(' | ')} |`),
    '',
    `${met} of ${checks.length} targets met. Every target with its result, each phase's table, the ratios (made round by round) ` +
    'and the notes: [`bench/results/latest.md`](bench/results/latest.md).'
  ].join('\n')
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
