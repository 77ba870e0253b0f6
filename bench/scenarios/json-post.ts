import { atMost, cpuPerRequest, highest, ownFigure, p99Delta, pairRatios, ran, rateNotReached, ratioById, rps, roundsOf, thresholdCheck } from '../checks.ts'
import { measureFixedRate, measureIdle, measureManyConnections, measureThroughput, type Measurement } from '../load.ts'
import { measurePacedRate } from '../paced-load.ts'
import type { BenchContext, Check, Evaluation, PreparedScenario, Ratio, Scenario, TargetResult } from '../scenario.ts'
import type { BenchSettings } from '../settings.ts'
import {
  APP_NAME, appRunRequest, directTarget, expectGreeting, expectRawGreeting, GREETING_BODY, PROJECT_ID, proxyTarget, runRequest, shareServers, sidecarTarget, startExampleApp
} from '../targets.ts'

/**
 * The sidecar's bread and butter: a small JSON POST answered at once by the example app, reached
 * directly, through the Node floor, the contract's floor, a bare http-proxy, the sidecar and
 * nginx. Targets (issue 40, after issue 17; the headline sidecar: cortex envelope, auth on,
 * LOG_LEVEL=info): requests/s ≥ 0.9× the floor's, CPU per request ≤ 1.15× the floor's;
 * RUNTIME=custom ≥ 0.9× the floor's requests/s; idle RSS ≤ 50 MB; peak RSS with 1,000
 * connections ≤ 110 MB; evenly paced 1,000 requests/s: p99 ≤ direct + 0.5 ms and ≤ 0.2 vCPU.
 */
const FLOOR_RPS_TARGET = 0.9
const FLOOR_CPU_TARGET = 1.15
const CUSTOM_FLOOR_RPS_TARGET = 0.9
const IDLE_RSS_TARGET_MB = 50
const MANY_RSS_TARGET_MB = 110
const P99_DELTA_TARGET_MS = 0.5
const VCPU_AT_RATE_TARGET = 0.2
const IDLE_SECONDS = 2

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app }, jwks, token, prepared } = await shareServers(ctx, { app: startExampleApp })
  const sidecar = (id: string, label: string, note: string, logLevel: 'info' | 'warn', env: NodeJS.ProcessEnv = {}) => sidecarTarget(ctx, {
    id, label, logLevel, env, appOrigin: app.origin, jwksUrl: jwks.url, notes: [note],
    request: origin => runRequest(origin, token),
    checkResponse: env.RUNTIME === 'custom' ? expectRawGreeting : expectGreeting
  })
  return prepared([
    directTarget('direct', 'direct (example app)', appRunRequest(app.origin), expectRawGreeting),
    proxyTarget(ctx, 'floor', 'the Node floor (undici Pool.dispatch, no features)', app, appRunRequest, expectRawGreeting),
    proxyTarget(ctx, 'floor-contract', 'the contract\'s floor (the Node floor + token cache, run id, envelope, pino line, metrics)', app,
      origin => runRequest(origin, token), expectGreeting, 'floor-contract', { JWKS_URL: jwks.url.href, PROJECT_ID, APP_NAME }),
    proxyTarget(ctx, 'http-proxy', 'bare http-proxy (keep-alive agent)', app, appRunRequest, expectRawGreeting),
    sidecar('sidecar', 'sidecar (cortex, auth, LOG_LEVEL=info)', 'as shipped: cortex envelope, auth on (cached token), one pino line per request (to a file)', 'info'),
    sidecar('sidecar-warn', 'sidecar (LOG_LEVEL=warn)', 'LOG_LEVEL=warn: what the per-request log line costs', 'warn'),
    sidecar('sidecar-custom', 'sidecar (RUNTIME=custom, info)', 'RUNTIME=custom: the app\'s answer passed as it is, no envelope; LOG_LEVEL=info', 'info', { RUNTIME: 'custom' }),
    proxyTarget(ctx, 'nginx', 'nginx (1 worker, upstream keepalive)', app, appRunRequest, expectRawGreeting)
  ])
}

/** Targets' ratios and deltas are made round by round, then the median (see pairedByRound). */
function evaluate (results: TargetResult[], settings: BenchSettings): Evaluation {
  const rounds = (id: string, phaseId: string) => roundsOf(results, id, phaseId)
  const measured = results.filter(r => r.skipped === undefined)
  const proxies = measured.filter(r => r.id !== 'direct')
  const ratios: Ratio[] = []
  // every sidecar row against the Node floor, the bare proxy, nginx and the app: requests/s and CPU per request
  for (const sidecar of measured.filter(r => r.id.startsWith('sidecar'))) {
    for (const [other, name] of [['floor', 'the Node floor'], ['floor-contract', 'the contract\'s floor'], ['http-proxy', 'bare http-proxy'], ['nginx', 'nginx'], ['direct', 'direct']] as const) {
      if (!ran(results, other)) continue
      ratios.push(...pairRatios(results, 'throughput', '×', rps, [[`${sidecar.id}/${other}`, `${sidecar.label} / ${name}, requests/s`, sidecar.id, other]]))
      if (other !== 'direct') ratios.push(...pairRatios(results, 'throughput', '×', cpuPerRequest, [[`cpu/${sidecar.id}/${other}`, `${sidecar.label} / ${name}, CPU per request`, sidecar.id, other]]))
    }
  }
  // what the contract's per-call work costs on its own, done the cheapest way (floor-contract-proxy.mjs)
  if (ran(results, 'floor-contract') && ran(results, 'floor')) {
    ratios.push(...pairRatios(results, 'throughput', '×', rps, [['floor-contract/floor', 'the contract\'s floor / the Node floor, requests/s', 'floor-contract', 'floor']]),
      ...pairRatios(results, 'throughput', '×', cpuPerRequest, [['cpu/floor-contract/floor', 'the contract\'s floor / the Node floor, CPU per request', 'floor-contract', 'floor']]))
  }
  const ratio = (id: string): Ratio => ratioById(ratios, id)
  const checks: Check[] = [
    thresholdCheck(`sidecar (cortex, auth, info) ≥ ${FLOOR_RPS_TARGET}× the Node floor's requests/s`, ratio('sidecar/floor'), FLOOR_RPS_TARGET, true),
    atMost(`sidecar CPU per request ≤ ${FLOOR_CPU_TARGET}× the Node floor's`, ratio('cpu/sidecar/floor'), FLOOR_CPU_TARGET),
    thresholdCheck(`RUNTIME=custom ≥ ${CUSTOM_FLOOR_RPS_TARGET}× the Node floor's requests/s (info log)`, ratio('sidecar-custom/floor'), CUSTOM_FLOOR_RPS_TARGET, true)
  ]

  // memory: as started (idle, before any load) and holding many connections (every round counts: see highest)
  const peak = (id: string, phaseId: string) => rounds(id, phaseId).map(m => m?.peakRssMb ?? null)
  for (const r of proxies) {
    ratios.push(highest(`rss/idle/${r.id}`, `${r.label}: idle RSS (as started, before any load)`, peak(r.id, 'idle')),
      highest(`rss/many/${r.id}`, `${r.label}: peak RSS with ${settings.manyConnections} concurrent connections`, peak(r.id, 'many')))
  }
  checks.push(atMost(`sidecar idle RSS ≤ ${IDLE_RSS_TARGET_MB} MB`, ratio('rss/idle/sidecar'), IDLE_RSS_TARGET_MB))
  const failed = rounds('sidecar', 'many').reduce((total, m) => total + (m === undefined ? 0 : m.errors + m.non2xx), 0)
  const rssCheck = atMost(`sidecar peak RSS ≤ ${MANY_RSS_TARGET_MB} MB with ${settings.manyConnections} busy connections`, ratio('rss/many/sidecar'), MANY_RSS_TARGET_MB)
  checks.push(failed === 0 ? rssCheck : { ...rssCheck, detail: `${rssCheck.detail}; the phase also had ${failed} failed requests (see its table): the memory figure stands, its rates do not` })

  // at an evenly paced rate: added p99 and CPU (the autocannon fixed-rate phase is reported, not checked: it sends bursts)
  for (const [phaseId, phaseName] of [['fixedRate', 'autocannon overallRate'], ['paced', 'evenly paced']] as const) {
    ratios.push(...pairRatios(results, phaseId, 'ms', p99Delta,
      proxies.map(r => [`p99-delta/${phaseId}/${r.id}`, `${r.label}: p99 − direct p99 at ${settings.rate} req/s, ${phaseName}`, r.id, 'direct'])))
  }
  const notReached = rateNotReached([...rounds('sidecar', 'paced'), ...rounds('direct', 'paced')], settings.rate, 'req/s', 'the rate')
  checks.push(atMost(`sidecar p99 ≤ direct p99 + ${P99_DELTA_TARGET_MS} ms at ${settings.rate} req/s, evenly paced`, ratio('p99-delta/paced/sidecar'), P99_DELTA_TARGET_MS, notReached))
  for (const r of proxies) {
    ratios.push(ownFigure(`vcpu/paced/${r.id}`, `${r.label}: vCPU at ${settings.rate} req/s, evenly paced`, 'vCPU',
      rounds(r.id, 'paced'), (x: Measurement) => (x.cpu?.targetCoresUsed ?? NaN) * (settings.rate / x.rps)))
  }
  checks.push(atMost(`sidecar CPU ≤ ${VCPU_AT_RATE_TARGET} vCPU at ${settings.rate} req/s, evenly paced`, ratio('vcpu/paced/sidecar'), VCPU_AT_RATE_TARGET, notReached))
  return { ratios, checks }
}

export const jsonPostScenario: Scenario = {
  name: 'json-post',
  baselineId: 'direct',
  description: `small JSON POST (${GREETING_BODY}) answered at once by the example app; sidecar with auth on and a cached token`,
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
