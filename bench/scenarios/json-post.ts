import { measureFixedRate, measureIdle, measureManyConnections, measureThroughput, type LoadRequest, type Measurement } from '../load.ts'
import { measurePacedRate } from '../paced-load.ts'
import { ownFigure, pairedRatio, type PhaseRounds, roundsOf, thresholdCheck } from '../checks.ts'
import type { BenchContext, Check, Evaluation, PreparedScenario, Ratio, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import type { BenchSettings } from '../settings.ts'
import { benchAuth, nginxSkipReason, serverTarget, startBareProxy, startExampleApp, startFloorProxy, startNginx, startSidecarProcess } from '../targets.ts'

/**
 * The sidecar's bread and butter: a small JSON POST answered at once by the example app,
 * reached directly, through the Node floor, a bare http-proxy, the sidecar and nginx. Targets
 * (issue 17, same-run ratios; the headline sidecar: cortex envelope, auth on, LOG_LEVEL=info):
 * requests/s ≥ 0.85× the floor's, CPU per request ≤ 1.2× the floor's; RUNTIME=custom ≥ 0.9× the
 * floor's requests/s; idle RSS ≤ 55 MB; peak RSS with 1,000 connections ≤ 110 MB; at an evenly
 * paced 1,000 requests/s, p99 ≤ direct + 1 ms and ≤ 0.2 vCPU.
 */
const PROJECT_ID = 'bench'
const APP_NAME = 'app'
const BODY = '{"name":"Ada"}'
const JSON_HEADERS = { 'content-type': 'application/json' }
const FLOOR_RPS_TARGET = 0.85
const FLOOR_CPU_TARGET = 1.2
const CUSTOM_FLOOR_RPS_TARGET = 0.9
const IDLE_RSS_TARGET_MB = 55
const MANY_RSS_TARGET_MB = 110
const P99_DELTA_TARGET_MS = 1
const VCPU_AT_RATE_TARGET = 0.2
const IDLE_SECONDS = 2

function expectGreeting (status: number, body: string, pick: (parsed: Record<string, unknown>) => unknown): void {
  if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
  const greeting = pick(JSON.parse(body) as Record<string, unknown>)
  if (greeting !== 'Hello, Ada!') throw new Error(`unexpected body: ${body.slice(0, 200)}`)
}

const rawApp = (status: number, body: string): void => { expectGreeting(status, body, parsed => parsed.greeting) }
const enveloped = (status: number, body: string): void => {
  expectGreeting(status, body, parsed => (parsed.result as Record<string, unknown> | undefined)?.greeting)
}

function appRequest (origin: string): LoadRequest {
  return { url: `${origin}/run`, method: 'POST', headers: JSON_HEADERS, body: BODY }
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const app = await startExampleApp(ctx)
  const { jwks, token } = await benchAuth(PROJECT_ID)

  /**
   * The sidecar as shipped (`sidecar`: cortex, auth, LOG_LEVEL=info), without its log line
   * (`sidecar-warn`) and with RUNTIME=custom (no envelope); `bin`: an older build (BENCH_BEFORE_BIN).
   */
  const sidecarTarget = (id: string, label: string, note: string, options: { logLevel: 'info' | 'warn', env?: NodeJS.ProcessEnv }): TargetDef => ({
    id,
    label,
    start: async (bin?: string) => {
      const sidecar = await startSidecarProcess(ctx, {
        appOrigin: app.origin,
        jwksUrl: jwks.url,
        logLevel: options.logLevel,
        name: id,
        env: { PROJECT_ID, APP_NAME, ...options.env },
        bin
      })
      return {
        request: {
          url: `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/run`,
          method: 'POST',
          headers: { ...JSON_HEADERS, authorization: `Bearer ${token}` },
          body: BODY
        },
        checkResponse: options.env?.RUNTIME === 'custom' ? rawApp : enveloped,
        children: [sidecar.child],
        notes: [note],
        stop: async () => { await sidecar.child.stop() }
      }
    }
  })

  const nginxSkip = nginxSkipReason()
  const targets: TargetDef[] = [
    {
      id: 'direct',
      label: 'direct (example app)',
      start: async () => ({ request: appRequest(app.origin), checkResponse: rawApp, children: [], stop: async () => {} })
    },
    {
      id: 'floor',
      label: 'the Node floor (undici Pool.dispatch, no features)',
      start: serverTarget(async () => await startFloorProxy(ctx, app.origin), appRequest, rawApp)
    },
    {
      id: 'http-proxy',
      label: 'bare http-proxy (keep-alive agent)',
      start: serverTarget(async () => await startBareProxy(ctx, app.origin), appRequest, rawApp)
    },
    sidecarTarget('sidecar', 'sidecar (cortex, auth, LOG_LEVEL=info)', 'as shipped: cortex envelope, auth on (cached token), one pino line per request (to a file)', { logLevel: 'info' }),
    sidecarTarget('sidecar-warn', 'sidecar (LOG_LEVEL=warn)', 'LOG_LEVEL=warn: what the per-request log line costs', { logLevel: 'warn' }),
    sidecarTarget('sidecar-custom', 'sidecar (RUNTIME=custom, info)', 'RUNTIME=custom: the app\'s answer passed as it is, no envelope; LOG_LEVEL=info', { logLevel: 'info', env: { RUNTIME: 'custom' } }),
    {
      id: 'nginx',
      label: 'nginx (1 worker, upstream keepalive)',
      ...(nginxSkip === undefined ? {} : { skipReason: nginxSkip }),
      start: serverTarget(async () => await startNginx(ctx, app.port), appRequest, rawApp)
    }
  ]
  return {
    targets,
    children: [app.child],
    close: async () => {
      await app.child.stop()
      await jwks.close()
    }
  }
}

/** Targets' ratios and deltas are made round by round, then the median (see pairedByRound). */
function evaluate (results: TargetResult[], settings: BenchSettings): Evaluation {
  const rounds = (id: string, phaseId: string): PhaseRounds => roundsOf(results, id, phaseId)
  const ran = (id: string): boolean => results.some(r => r.id === id && r.skipped === undefined)
  const rps = (x: Measurement, y: Measurement): number => x.rps / y.rps
  const cpu = (x: Measurement, y: Measurement): number => (x.cpu?.targetUsPerRequest ?? NaN) / (y.cpu?.targetUsPerRequest ?? NaN)
  const ratios: Ratio[] = []
  const checks: Check[] = []
  const sidecars = results.filter(r => r.id.startsWith('sidecar') && r.skipped === undefined)

  // every sidecar row against the Node floor, the bare proxy, nginx and the app: requests/s and CPU per request
  for (const sidecar of sidecars) {
    for (const [other, name] of [['floor', 'the Node floor'], ['http-proxy', 'bare http-proxy'], ['nginx', 'nginx'], ['direct', 'direct']] as const) {
      if (!ran(other)) continue
      ratios.push(pairedRatio(`${sidecar.id}/${other}`, `${sidecar.label} / ${name}, requests/s`, '×', rounds(sidecar.id, 'throughput'), rounds(other, 'throughput'), rps))
      if (other !== 'direct') {
        ratios.push(pairedRatio(`cpu/${sidecar.id}/${other}`, `${sidecar.label} / ${name}, CPU per request`, '×', rounds(sidecar.id, 'throughput'), rounds(other, 'throughput'), cpu))
      }
    }
  }
  const ratio = (id: string): Ratio => ratios.find(r => r.id === id) ?? { id, label: id, unit: '×', value: null }
  checks.push(thresholdCheck(`sidecar (cortex, auth, info) ≥ ${FLOOR_RPS_TARGET}× the Node floor's requests/s`, ratio('sidecar/floor'), FLOOR_RPS_TARGET, true))
  checks.push(thresholdCheck(`sidecar CPU per request ≤ ${FLOOR_CPU_TARGET}× the Node floor's`, ratio('cpu/sidecar/floor'), FLOOR_CPU_TARGET + 1e-9, false))
  checks.push(thresholdCheck(`RUNTIME=custom ≥ ${CUSTOM_FLOOR_RPS_TARGET}× the Node floor's requests/s (info log)`, ratio('sidecar-custom/floor'), CUSTOM_FLOOR_RPS_TARGET, true))

  // memory: as started (idle, before any load) and holding many connections
  for (const result of results) {
    if (result.id === 'direct' || result.skipped !== undefined) continue
    ratios.push(peakMemory(`rss/idle/${result.id}`, `${result.label}: idle RSS (as started, before any load)`, rounds(result.id, 'idle')))
    ratios.push(peakMemory(`rss/many/${result.id}`, `${result.label}: peak RSS with ${settings.manyConnections} concurrent connections`, rounds(result.id, 'many')))
  }
  checks.push(thresholdCheck(`sidecar idle RSS ≤ ${IDLE_RSS_TARGET_MB} MB`, ratio('rss/idle/sidecar'), IDLE_RSS_TARGET_MB + 1e-9, false))
  const many = rounds('sidecar', 'many').filter((m): m is Measurement => m !== undefined)
  const failed = many.reduce((total, m) => total + m.errors + m.non2xx, 0)
  const rssCheck = thresholdCheck(`sidecar peak RSS ≤ ${MANY_RSS_TARGET_MB} MB with ${settings.manyConnections} busy connections`, ratio('rss/many/sidecar'), MANY_RSS_TARGET_MB + 1e-9, false)
  checks.push(failed === 0 ? rssCheck : { ...rssCheck, detail: `${rssCheck.detail}; the phase also had ${failed} failed requests (see its table): the memory figure stands, its rates do not` })

  // at an evenly paced rate: added p99 and CPU (the autocannon fixed-rate phase is reported, not checked: it sends bursts)
  for (const [phaseId, phaseName] of [['fixedRate', 'autocannon overallRate'], ['paced', 'evenly paced']] as const) {
    for (const result of results) {
      if (result.id === 'direct' || result.skipped !== undefined) continue
      ratios.push(pairedRatio(`p99-delta/${phaseId}/${result.id}`, `${result.label}: p99 − direct p99 at ${settings.rate} req/s, ${phaseName}`, 'ms',
        rounds(result.id, phaseId), rounds('direct', phaseId), (x, y) => x.p99Ms - y.p99Ms))
    }
  }
  const shortOfRate = [...rounds('sidecar', 'paced'), ...rounds('direct', 'paced')]
    .filter((m): m is Measurement => m !== undefined && m.valid && m.rps < 0.9 * settings.rate)
  const notReached = shortOfRate.length > 0 ? `the rate was not reached (${shortOfRate.map(m => Math.round(m.rps)).join(', ')} req/s)` : undefined
  checks.push(thresholdCheck(`sidecar p99 ≤ direct p99 + ${P99_DELTA_TARGET_MS} ms at ${settings.rate} req/s, evenly paced`,
    ratio('p99-delta/paced/sidecar'), P99_DELTA_TARGET_MS + 1e-9, false, notReached))
  for (const result of results) {
    if (result.id === 'direct' || result.skipped !== undefined) continue
    ratios.push(ownFigure(`vcpu/paced/${result.id}`, `${result.label}: vCPU at ${settings.rate} req/s, evenly paced`, 'vCPU',
      rounds(result.id, 'paced'), x => (x.cpu?.targetCoresUsed ?? NaN) * (settings.rate / x.rps)))
  }
  checks.push(thresholdCheck(`sidecar CPU ≤ ${VCPU_AT_RATE_TARGET} vCPU at ${settings.rate} req/s, evenly paced`, ratio('vcpu/paced/sidecar'), VCPU_AT_RATE_TARGET + 1e-9, false, notReached))
  return { ratios, checks }
}

/**
 * The highest peak RSS of a target's rounds. Unlike the rates, memory is read from every round,
 * also one with failed requests: the process held those connections all the same.
 */
function peakMemory (id: string, label: string, measured: PhaseRounds): Ratio {
  const perRound = measured.map(m => m?.peakRssMb ?? null)
  const values = perRound.filter((v): v is number => v !== null)
  return { id, label, unit: 'MB', value: values.length === 0 ? null : Math.max(...values), perRound, perRoundQuiet: perRound.map(() => true), disturbed: false }
}

export const jsonPostScenario: Scenario = {
  name: 'json-post',
  baselineId: 'direct',
  description: `small JSON POST (${BODY}) answered at once by the example app; sidecar with auth on and a cached token`,
  phases: [
    { id: 'idle', label: `idle (as started: ${IDLE_SECONDS} s at rest before any load, then one call)`, run: async request => await measureIdle(request, IDLE_SECONDS), beforeWarmUp: true },
    { id: 'throughput', label: 'max throughput', run: measureThroughput },
    { id: 'fixedRate', label: 'fixed rate (autocannon overallRate)', run: measureFixedRate },
    { id: 'paced', label: 'fixed rate, evenly paced', run: measurePacedRate },
    { id: 'many', label: 'many connections, max throughput', run: measureManyConnections }
  ],
  method: settings =>
    `Max throughput: ${settings.connections} connections, pipelining 1. ` +
    `Fixed rate: ${settings.rate} req/s, by autocannon \`overallRate\` over ${settings.rateConnections} connections ` +
    '(each connection spends its per-second budget in one burst) and by an evenly paced open-loop generator. ' +
    `Many connections: ${settings.manyConnections} connections at once, pipelining 1, as fast as the target answers (what holding them costs in memory). ` +
    `Idle: each target as it started, ${IDLE_SECONDS} s at rest before any load, then one call (its peak RSS). ` +
    'Latencies in ms, 2xx responses only; CPU µs/req = CPU time of the target\'s own processes (proxy) and of the app, per response.',
  beforeIds: ['sidecar'],
  prepare,
  evaluate
}
