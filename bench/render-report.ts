import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { renderChart } from './chart.ts'
import { updateReadme } from './readme-summary.ts'
import { SCENARIOS } from './scenarios/all.ts'
import { type BenchReport, renderMarkdown } from './report.ts'

/**
 * Re-renders a report without re-running the bench: reads a latest.json (default
 * bench/results/latest.json) and writes the .md and .svg beside it, with the same base name.
 *
 *   node --import tsx bench/render-report.ts [--evaluate] [--readme] [path/to/latest.json]
 *
 * `--evaluate` first makes each scenario's ratios and checks again from the stored measurements
 * (after a change to a scenario's `evaluate`; the JSON is rewritten too). `--readme` also rewrites
 * the summary between the markers in the project README.
 */
const here = dirname(fileURLToPath(import.meta.url))
const args = process.argv.slice(2)
const jsonFile = resolve(args.find(a => !a.startsWith('--')) ?? join(here, 'results', 'latest.json'))
function fail (message: string): never {
  console.error(`bench:render: ${message}`)
  process.exit(1)
}

let report: BenchReport
try {
  report = JSON.parse(readFileSync(jsonFile, 'utf8')) as BenchReport
} catch (error) {
  fail(`cannot read ${jsonFile}: ${(error as Error).message}`)
}
if (report.schema !== 1 || !Array.isArray(report.scenarios)) fail(`${jsonFile} is not a bench report (schema 1 with scenarios)`)

if (args.includes('--evaluate')) {
  const settings = { ...report.settings, targets: report.settings.targets === null ? undefined : new Set(report.settings.targets) }
  report = {
    ...report,
    scenarios: report.scenarios.map(stored => {
      const evaluation = SCENARIOS.find(s => s.name === stored.name)?.evaluate(stored.targets, settings)
      return evaluation === undefined ? stored : { ...stored, ratios: evaluation.ratios, checks: evaluation.checks, ...(evaluation.notes === undefined ? {} : { notes: evaluation.notes }) }
    })
  }
  writeFileSync(jsonFile, JSON.stringify(report, null, 2) + '\n')
  console.error(`re-evaluated and wrote ${relative(process.cwd(), jsonFile)}`)
}

const base = jsonFile.replace(/\.json$/, '')
for (const [file, content] of [[`${base}.md`, renderMarkdown(report)], [`${base}.svg`, renderChart(report)]] as const) {
  writeFileSync(file, content)
  console.error(`wrote ${relative(process.cwd(), file)}`)
}
if (args.includes('--readme')) {
  if (!updateReadme(join(here, '..', 'README.md'), report)) fail('README.md has no bench-summary markers')
  console.error('updated the summary in README.md')
}
