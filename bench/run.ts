import { existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { combineRounds, QUIET_CORES } from './aggregate.ts'
import { type BenchChild, guardAgainstOrphans, killAllChildren, runningChildren } from './child-processes.ts'
import { measureCpu, QuietGate } from './cpu-usage.ts'
import { type CpuUse, type LoadRequest, type Measurement, warmUp } from './load.ts'
import { findNginx, nginxVersion } from './nginx-config.ts'
import { safeUrl } from './postgres-schema.ts'
import { watchPeakRss } from './process-memory.ts'
import { updateReadme } from './readme-summary.ts'
import { type BenchReport, environment, scenarioReport, type ScenarioReport, writeReport } from './report.ts'
import { cpuPerRequest, pairRatios, roundsOf, rps } from './checks.ts'
import type { BenchContext, LoadPhase, PreparedScenario, Ratio, RunningTarget, Scenario, TargetDef, TargetResult } from './scenario.ts'
import { SCENARIOS } from './scenarios/all.ts'
import { type BenchSettings, loadSettings } from './settings.ts'

/**
 * `npm run bench`: the chosen scenarios (BENCH_SCENARIOS; default all), every target in turn
 * (interleaved rounds), then bench/results/latest.{json,md,svg} and the Markdown on stdout; progress on stderr.
 */
function chosenScenarios (settings: BenchSettings): Scenario[] {
  const names = settings.scenarios ?? ['all']
  if (names.includes('all')) return SCENARIOS
  const unknown = names.filter(name => !SCENARIOS.some(s => s.name === name))
  if (unknown.length > 0) throw new Error(`BENCH_SCENARIOS: unknown ${unknown.join(', ')}; known: ${SCENARIOS.map(s => s.name).join(', ')}, all`)
  return SCENARIOS.filter(s => names.includes(s.name))
}

const root = join(dirname(fileURLToPath(import.meta.url)), '..')
const resultsDir = join(root, 'bench/results')
const log = (line: string): void => { process.stderr.write(`bench: ${line}\n`) }

async function sendOne ({ url, method, headers, body }: LoadRequest): Promise<{ status: number, body: string }> {
  const response = await fetch(url, { method, headers, ...(body === undefined ? {} : { body }), signal: AbortSignal.timeout(10_000) })
  return { status: response.status, body: await response.text() }
}

function summary (m: Measurement, unit = 'req/s'): string {
  const bad = m.valid ? '' : ` INVALID (errors ${m.errors}, timeouts ${m.timeouts}, non-2xx ${m.non2xx})`
  const cpu = m.cpu === undefined
    ? ''
    : `; CPU µs/req target ${m.cpu.targetUsPerRequest?.toFixed(0) ?? '–'} (${m.cpu.targetCoresUsed?.toFixed(2) ?? '–'} vCPU), app ${m.cpu.appUsPerRequest?.toFixed(0) ?? '–'}; background ${m.cpu.backgroundCores?.toFixed(2) ?? '?'} cores`
  const memory = m.peakRssMb === undefined ? '' : `; peak RSS ${m.peakRssMb.toFixed(1)} MB${m.peakRssPhaseOnly === false ? ' (since start)' : ''}`
  const extra = m.extra === undefined ? '' : `; ${Object.entries(m.extra).map(([k, v]) => `${k} ${Number.isInteger(v) ? v : v.toFixed(3)}`).join(', ')}`
  return `${Math.round(m.rps)} ${unit}, p50 ${m.p50Ms.toFixed(2)} ms, p99 ${m.p99Ms.toFixed(2)} ms${cpu}${memory}${extra}${bad}`
}

function sumOf (seconds: Record<string, number>, children: BenchChild[]): number | null {
  const known = children.filter(c => seconds[c.name] !== undefined)
  return known.length === 0 ? null : known.reduce((total, c) => total + (seconds[c.name] as number), 0)
}

/**
 * Runs one phase while accounting the CPU of the target's processes, the shared ones (and the
 * outside processes working for them), the load generator and the rest of the machine.
 */
async function runPhase (phase: LoadPhase, target: RunningTarget, prepared: PreparedScenario, ctx: BenchContext): Promise<Measurement> {
  const { children: shared, outsideProcesses: outside } = prepared
  const pids = { ...Object.fromEntries([...target.children, ...shared].map(c => [c.name, c.pid])), ...(outside === undefined ? {} : await outside()) }
  const run = target.runPhase ?? (async (p: LoadPhase, settings: BenchSettings) => await p.run(target.request, settings))
  const readPeakRss = watchPeakRss(target.children.map(c => c.pid))
  const { result, cpuSeconds, backgroundCores, wallSeconds } = await measureCpu(pids, async () => await run(phase, ctx.settings), outside)
  const memory = readPeakRss()
  const targetSeconds = sumOf(cpuSeconds, target.children)
  const sharedSeconds = sumOf(cpuSeconds, shared)
  const childNames = new Set([...target.children, ...shared].map(c => c.name))
  const outsideNames = Object.keys(cpuSeconds).filter(name => !childNames.has(name) && name !== 'load generator')
  const appSeconds = outsideNames.length === 0
    ? sharedSeconds
    : (sharedSeconds ?? 0) + outsideNames.reduce((total, name) => total + (cpuSeconds[name] as number), 0)
  const perRequest = (seconds: number | null): number | null => seconds === null || result.ok === 0 ? null : seconds / result.ok * 1e6
  const cpu: CpuUse = {
    targetSeconds,
    appSeconds,
    loadGeneratorSeconds: cpuSeconds['load generator'] ?? 0,
    targetUsPerRequest: perRequest(targetSeconds),
    targetCoresUsed: targetSeconds === null || wallSeconds <= 0 ? null : targetSeconds / wallSeconds,
    appUsPerRequest: perRequest(appSeconds),
    backgroundCores: backgroundCores ?? null,
    byProcess: cpuSeconds
  }
  return { ...result, cpu, ...(memory === undefined ? {} : { peakRssMb: memory.peakRssMb, peakRssPhaseOnly: memory.phaseOnly }) }
}

/** One round on one target: start, check a response, warm up, every phase, stop. Throws on failure. */
async function measureRound (scenario: Scenario, def: TargetDef, ctx: BenchContext, prepared: PreparedScenario, tag: string): Promise<{ phases: Record<string, Measurement>, notes: string[] | undefined }> {
  const phases: Record<string, Measurement> = {}
  const shared = prepared.children
  log(`${tag}: starting`)
  const target = await def.start()
  try {
    const first = await sendOne(target.request)
    target.checkResponse(first.status, first.body)
    const all = scenario.phases.filter(phase => def.phases === undefined || def.phases.includes(phase.id))
    const ordered = [...all.filter(phase => phase.beforeWarmUp === true), undefined, ...all.filter(phase => phase.beforeWarmUp !== true)]
    for (const phase of ordered) {
      if (phase === undefined) {
        log(`${tag}: warming up ${ctx.settings.warmupSeconds} s`)
        await (scenario.warmUp ?? (async (t: RunningTarget, s: BenchSettings) => await warmUp(t.request, s)))(target, ctx.settings)
        continue
      }
      await sleep(500)
      await ctx.quiet.wait([...shared, ...target.children].map(c => c.pid))
      phases[phase.id] = await runPhase(phase, target, prepared, ctx)
      log(`${tag}: ${phase.label}: ${summary(phases[phase.id] as Measurement, phase.rateUnit)}`)
      const gone = [...shared, ...target.children].find(c => c.exited !== null)?.name
      if (gone !== undefined) throw new Error(`${gone} exited during ${phase.label}`)
    }
    return { phases, notes: target.notes }
  } finally {
    await target.stop()
  }
}

async function runScenario (scenario: Scenario, ctx: BenchContext): Promise<ScenarioReport> {
  const { settings } = ctx
  log(`scenario ${scenario.name}: ${scenario.description}`)
  const prepared = await scenario.prepare(ctx)
  const defs = withBefore(scenario, prepared.targets, settings.beforeBin)
    .filter(def => settings.targets === undefined || def.id === scenario.baselineId || settings.targets.has(def.id))
  const rounds = new Map<string, Array<Record<string, Measurement>>>(defs.map(def => [def.id, []]))
  const notes = new Map<string, string[]>()
  const failures = new Map<string, string>()
  try {
    for (let round = 1; round <= settings.rounds; round++) {
      for (const def of defs) {
        if (def.skipReason !== undefined) continue
        if (failures.has(def.id)) { rounds.get(def.id)?.push({}); continue }
        const tag = `${scenario.name}/${def.id} [round ${round}/${settings.rounds}]`
        const measured = await measureRound(scenario, def, ctx, prepared, tag).catch((error: unknown) => {
          const message = error instanceof Error ? error.message : String(error)
          log(`${tag}: FAILED: ${message}`)
          failures.set(def.id, message)
          return { phases: {}, notes: undefined }
        })
        rounds.get(def.id)?.push(measured.phases)
        if (measured.notes !== undefined) notes.set(def.id, measured.notes)
      }
    }
  } finally {
    await prepared.close()
  }
  const results: TargetResult[] = defs.map(def => {
    const base = { id: def.id, label: def.label, ...(notes.has(def.id) ? { notes: notes.get(def.id) } : {}) }
    if (def.skipReason !== undefined) {
      log(`${scenario.name}/${def.id}: skipped (${def.skipReason})`)
      return { ...base, skipped: def.skipReason, phases: {}, rounds: [] }
    }
    const measuredRounds = rounds.get(def.id) ?? []
    const phases: Record<string, Measurement> = {}
    for (const phase of scenario.phases) {
      const measured = measuredRounds.map(r => r[phase.id]).filter((m): m is Measurement => m !== undefined)
      if (measured.length > 0) phases[phase.id] = combineRounds(measured, phase.columns)
    }
    const failure = failures.get(def.id)
    return { ...base, phases, rounds: measuredRounds, ...(failure === undefined ? {} : { failure }) }
  })
  const evaluation = scenario.evaluate(results, settings)
  return scenarioReport(scenario, results, { ...evaluation, ratios: [...evaluation.ratios, ...beforeRatios(scenario, results)] }, settings)
}

/** With BENCH_BEFORE_BIN: each of the scenario's `beforeIds` followed by `<id>-before`, the same target started on the older build. */
function withBefore (scenario: Scenario, targets: TargetDef[], bin: string | undefined): TargetDef[] {
  if (bin === undefined) return targets
  return targets.flatMap(def => scenario.beforeIds?.includes(def.id) === true
    ? [def, { ...def, id: `${def.id}-before`, label: `${def.label}, older build`, start: async () => await def.start(bin) }]
    : [def])
}

/** This build / the older one, per `beforeIds` target: rate and CPU per request of the first phase (after any idle one) both ran. */
function beforeRatios (scenario: Scenario, results: TargetResult[]): Ratio[] {
  const both = (id: string, phase: string): boolean => [id, `${id}-before`].every(t => roundsOf(results, t, phase).some(m => m !== undefined))
  const firstPhase = (id: string): string | undefined => scenario.phases.find(p => p.beforeWarmUp !== true && both(id, p.id))?.id
  return (scenario.beforeIds ?? []).flatMap(id => {
    const phase = firstPhase(id)
    return phase === undefined ? [] : [
      ...pairRatios(results, phase, '×', rps, [[`${id}/${id}-before`, `${id} / the older build (BENCH_BEFORE_BIN), ${phase} rate`, id, `${id}-before`]]),
      ...pairRatios(results, phase, '×', cpuPerRequest, [[`cpu/${id}/${id}-before`, `${id} / the older build, CPU per request (${phase})`, id, `${id}-before`]])
    ]
  })
}

async function main (): Promise<number> {
  const settings = loadSettings()
  const scenarios = chosenScenarios(settings)
  for (const built of ['dist/bin/app-sidecar.js', 'dist/bin/build-store.js', 'dist/demo/example-app.js']) {
    if (!existsSync(join(root, built))) throw new Error(`${built} is missing: run \`npm run build\` first (npm run bench does)`)
  }
  const tmpDir = mkdtempSync(join(tmpdir(), 'app-sidecar-bench-'))
  let keepTmp = settings.keepTmp
  const removeTmp = (): void => {
    if (keepTmp) log(`temp dir kept (child logs, nginx.conf): ${tmpDir}`)
    else rmSync(tmpDir, { recursive: true, force: true })
  }
  guardAgainstOrphans(removeTmp)
  // Budget: at most 5 minutes of waiting for a quiet machine over the whole run.
  const quiet = new QuietGate(QUIET_CORES, settings.quietWaitSeconds, settings.quietWaitSeconds === 0 ? 0 : 300, log)
  const ctx: BenchContext = { settings, root, tmpDir, quiet }
  const nginx = findNginx()
  const report: BenchReport = {
    schema: 1,
    date: new Date().toISOString(),
    environment: environment(nginx === undefined ? null : nginxVersion(nginx)),
    settings: { ...settings, targets: settings.targets === undefined ? null : [...settings.targets], databaseUrl: safeUrl(settings.databaseUrl), redisUrl: settings.redisUrl === undefined ? 'a private redis-server' : safeUrl(settings.redisUrl) },
    scenarios: []
  }
  try {
    for (const scenario of scenarios) {
      const result = await runScenario(scenario, ctx)
      if (result.targets.some(t => t.failure !== undefined)) keepTmp = true
      report.scenarios.push(result)
    }
  } catch (error) {
    keepTmp = true
    throw error
  } finally {
    if (runningChildren() > 0) {
      log(`${runningChildren()} child process(es) still running; killing them`)
      killAllChildren()
    }
    removeTmp()
  }
  const [jsonFile, markdownFile] = [join(resultsDir, 'latest.json'), join(resultsDir, 'latest.md')]
  const markdown = writeReport(report, jsonFile, markdownFile)
  log(`wrote ${relative(root, jsonFile)}, ${relative(root, markdownFile)} and its chart (.svg)`)
  log(scenarios.length !== SCENARIOS.length || settings.targets !== undefined
    ? 'a partial run (BENCH_SCENARIOS or BENCH_TARGETS): README.md keeps the summary of the last full run'
    : updateReadme(join(root, 'README.md'), report) ? 'updated the summary in README.md' : 'README.md has no bench-summary markers: not updated')
  process.stdout.write(markdown)
  return 0
}

main().then(code => { process.exit(code) }, (error: unknown) => {
  process.stderr.write(`bench: ${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  killAllChildren()
  process.exit(1)
})
