import { measureFixedRate, measureManyConnections, measureThroughput, type LoadRequest, type Measurement } from '../load.ts'
import { measurePacedRate } from '../paced-load.ts'
import { pairedByRound } from '../aggregate.ts'
import { ownFigure, thresholdCheck } from '../checks.ts'
import { formatOf, perRoundText } from '../report.ts'
import type { BenchContext, Check, Evaluation, PreparedScenario, Ratio, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import type { BenchSettings } from '../settings.ts'
import { benchAuth, nginxSkipReason, serverTarget, startBareProxy, startExampleApp, startFloorProxy, startNginx, startSidecarProcess } from '../targets.ts'

/**
 * The sidecar's bread and butter: a small JSON POST answered at once by the example app,
 * reached directly, through a bare http-proxy, through the sidecar (auth on, a cached token)
 * and through nginx. Targets (issues 2 and 7): sidecar ≥ 1.3× the bare proxy's requests/s; at a
 * fixed 1,000 requests/s its p99 no more than 1 ms above direct; under 0.1 vCPU per 1,000
 * requests/s (Envoy's published figure is 0.35); under 80 MB RSS at 1,000 concurrent connections.
 */
const PROJECT_ID = 'bench'
const APP_NAME = 'app'
const BODY = '{"name":"Ada"}'
const JSON_HEADERS = { 'content-type': 'application/json' }
const THROUGHPUT_RATIO_TARGET = 1.3
const P99_DELTA_TARGET_MS = 1
const VCPU_PER_1000_RPS_TARGET = 0.1
const RSS_TARGET_MB = 80
/** V8's memory-lean mode, for the sidecar-lean row: what the memory target costs in throughput. */
const LEAN_NODE_FLAG = '--optimize-for-size'

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

  /** The sidecar as deployed (warn), with its per-request log line (info), or with V8 tuned for memory (lean). */
  const sidecarTarget = (variant: 'warn' | 'info' | 'lean'): TargetDef => ({
    id: variant === 'warn' ? 'sidecar' : `sidecar-${variant}`,
    label: variant === 'lean' ? `sidecar (node ${LEAN_NODE_FLAG})` : `sidecar (LOG_LEVEL=${variant})`,
    start: async () => {
      const logLevel = variant === 'info' ? 'info' : 'warn'
      const sidecar = await startSidecarProcess(ctx, {
        appOrigin: app.origin,
        jwksUrl: jwks.url,
        logLevel,
        name: `sidecar-${variant}`,
        env: { PROJECT_ID, APP_NAME },
        ...(variant === 'lean' ? { nodeArgs: [LEAN_NODE_FLAG] } : {})
      })
      return {
        request: {
          url: `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/run`,
          method: 'POST',
          headers: { ...JSON_HEADERS, authorization: `Bearer ${token}` },
          body: BODY
        },
        checkResponse: enveloped,
        children: [sidecar.child],
        notes: [{
          warn: 'LOG_LEVEL=warn: no per-request log line',
          info: 'LOG_LEVEL=info: one pino line per request (to a file)',
          lean: `LOG_LEVEL=warn, run as \`node ${LEAN_NODE_FLAG} app-sidecar.js\`: V8 keeps a small young generation and collects more often (memory traded for CPU)`
        }[variant]],
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
    sidecarTarget('warn'),
    ...(ctx.settings.sidecarInfo ? [sidecarTarget('info')] : []),
    sidecarTarget('lean'),
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

type PhaseRounds = Array<Measurement | undefined>

/** Targets' ratios and deltas are made round by round, then the median (see pairedByRound). */
function evaluate (results: TargetResult[], settings: BenchSettings): Evaluation {
  const rounds = (id: string, phaseId: string): PhaseRounds => results.find(r => r.id === id)?.rounds.map(r => r[phaseId]) ?? []
  const rpsRatio = (id: string, label: string, a: PhaseRounds, b: PhaseRounds): Ratio =>
    ({ id, label, unit: '×', ...pairedByRound(a, b, (x, y) => x.rps / y.rps) })
  const p99Delta = (id: string, label: string, a: PhaseRounds, b: PhaseRounds): Ratio =>
    ({ id, label, unit: 'ms', ...pairedByRound(a, b, (x, y) => x.p99Ms - y.p99Ms) })

  const sidecarRps = rounds('sidecar', 'throughput')
  const ratios: Ratio[] = [
    rpsRatio('sidecar/direct', 'sidecar / direct, requests/s', sidecarRps, rounds('direct', 'throughput')),
    rpsRatio('sidecar/http-proxy', 'sidecar / bare http-proxy, requests/s', sidecarRps, rounds('http-proxy', 'throughput')),
    rpsRatio('sidecar/nginx', 'sidecar / nginx, requests/s', sidecarRps, rounds('nginx', 'throughput'))
  ]
  ratios.push({
    id: 'cpu/sidecar/http-proxy',
    label: 'CPU per request at max throughput, sidecar / bare http-proxy (the proxy processes alone; steadier than requests/s on 2 shared cores)',
    unit: '×',
    ...pairedByRound(sidecarRps, rounds('http-proxy', 'throughput'), (x, y) => (x.cpu?.targetUsPerRequest ?? NaN) / (y.cpu?.targetUsPerRequest ?? NaN))
  })
  if (results.some(r => r.id === 'sidecar-info')) {
    ratios.push(rpsRatio('sidecar-info/sidecar', 'sidecar LOG_LEVEL=info / LOG_LEVEL=warn, requests/s', rounds('sidecar-info', 'throughput'), sidecarRps))
  }
  // issue 17: every sidecar figure against the Node floor, the headline at LOG_LEVEL=info (the SPEC's line per request)
  const floorRps = rounds('floor', 'throughput')
  const cpuRatio = (id: string, label: string, a: PhaseRounds, b: PhaseRounds): Ratio =>
    ({ id, label, unit: '×', ...pairedByRound(a, b, (x, y) => (x.cpu?.targetUsPerRequest ?? NaN) / (y.cpu?.targetUsPerRequest ?? NaN)) })
  for (const [id, name] of [['sidecar-info', 'sidecar (cortex, auth, LOG_LEVEL=info)'], ['sidecar', 'sidecar (cortex, auth, LOG_LEVEL=warn)']] as const) {
    if (!results.some(r => r.id === id && r.skipped === undefined)) continue
    ratios.push(rpsRatio(`${id}/floor`, `${name} / the Node floor, requests/s`, rounds(id, 'throughput'), floorRps))
    ratios.push(cpuRatio(`cpu/${id}/floor`, `${name} / the Node floor, CPU per request`, rounds(id, 'throughput'), floorRps))
  }
  if (results.some(r => r.id === 'sidecar-lean' && r.skipped === undefined)) {
    ratios.push(rpsRatio('sidecar-lean/sidecar', `sidecar ${LEAN_NODE_FLAG} / default, requests/s`, rounds('sidecar-lean', 'throughput'), sidecarRps))
    ratios.push(ownFigure('vcpu-per-1000/paced/sidecar-lean', `sidecar ${LEAN_NODE_FLAG}: vCPU per 1,000 req/s at ${settings.rate} req/s, evenly paced`, 'vCPU',
      rounds('sidecar-lean', 'paced'), x => (x.cpu?.targetCoresUsed ?? NaN) / (x.rps / 1000)))
  }
  for (const [phaseId, phaseName] of [['fixedRate', 'autocannon overallRate'], ['paced', 'evenly paced']] as const) {
    for (const result of results) {
      if (result.id === 'direct' || result.skipped !== undefined) continue
      ratios.push(p99Delta(`p99-delta/${phaseId}/${result.id}`, `${result.label}: p99 − direct p99 at ${settings.rate} req/s, ${phaseName}`,
        rounds(result.id, phaseId), rounds('direct', phaseId)))
    }
  }

  const ratio = (id: string): Ratio => ratios.find(r => r.id === id) as Ratio
  const perRound = (r: Ratio, format: (v: number) => string): string =>
    `per round: ${perRoundText(r, format)}${r.disturbed === true ? '; no round was quiet, disturbed by other load (†)' : ''}`

  const throughput = ratio('sidecar/http-proxy')
  const throughputLabel = `sidecar ≥ ${THROUGHPUT_RATIO_TARGET}× bare http-proxy requests/s`
  const checks: Check[] = [
    throughput.value === null
      ? { label: throughputLabel, status: 'INVALID', detail: 'no round where both ran without errors' }
      : {
          label: throughputLabel,
          status: throughput.value >= THROUGHPUT_RATIO_TARGET ? 'PASS' : 'FAIL',
          detail: `${formatOf(throughput)(throughput.value)} (${perRound(throughput, formatOf(throughput))})`
        }
  ]
  for (const [phaseId, phaseName] of [['fixedRate', 'autocannon overallRate'], ['paced', 'evenly paced']] as const) {
    const label = `sidecar p99 ≤ direct p99 + ${P99_DELTA_TARGET_MS} ms at ${settings.rate} req/s (${phaseName})`
    const delta = ratio(`p99-delta/${phaseId}/sidecar`)
    const short = [...rounds('sidecar', phaseId), ...rounds('direct', phaseId)]
      .filter((m): m is Measurement => m !== undefined && m.valid && m.rps < 0.9 * settings.rate)
    if (delta.value === null) {
      checks.push({ label, status: 'INVALID', detail: 'no round where both ran without errors' })
    } else if (short.length > 0) {
      checks.push({ label, status: 'INVALID', detail: `the rate was not reached (${short.map(m => Math.round(m.rps)).join(', ')} req/s)` })
    } else {
      checks.push({
        label,
        status: delta.value <= P99_DELTA_TARGET_MS ? 'PASS' : 'FAIL',
        detail: `${formatOf(delta)(delta.value)} (${perRound(delta, formatOf(delta))})`
      })
    }
  }

  // Issue 7: CPU per 1,000 req/s at the evenly paced 1,000 req/s (the literal case), and at max
  // throughput (where batching makes each request cheaper); RSS while holding many connections.
  const vcpuAtRate = ownFigure('vcpu-per-1000/paced/sidecar', `sidecar vCPU per 1,000 req/s at ${settings.rate} req/s, evenly paced`, 'vCPU',
    rounds('sidecar', 'paced'), x => (x.cpu?.targetCoresUsed ?? NaN) / (x.rps / 1000))
  ratios.push(vcpuAtRate)
  ratios.push(ownFigure('vcpu-per-1000/throughput/sidecar', 'sidecar CPU seconds per 1,000 requests at max throughput', 'vCPU',
    sidecarRps, x => (x.cpu?.targetUsPerRequest ?? NaN) / 1000))
  for (const result of results) {
    if (result.id === 'direct' || result.skipped !== undefined) continue
    ratios.push(peakMemory(`rss/many/${result.id}`, `${result.label}: peak RSS with ${settings.manyConnections} concurrent connections`,
      rounds(result.id, 'many')))
  }
  const shortOfRate = rounds('sidecar', 'paced').filter((m): m is Measurement => m !== undefined && m.valid && m.rps < 0.9 * settings.rate)
  checks.push(thresholdCheck(`sidecar CPU < ${VCPU_PER_1000_RPS_TARGET} vCPU per 1,000 req/s (at ${settings.rate} req/s, evenly paced)`,
    vcpuAtRate, VCPU_PER_1000_RPS_TARGET, false,
    shortOfRate.length > 0 ? `the rate was not reached (${shortOfRate.map(m => Math.round(m.rps)).join(', ')} req/s)` : undefined))
  const many = rounds('sidecar', 'many').filter((m): m is Measurement => m !== undefined)
  const rss = ratio('rss/many/sidecar')
  const rssCheck = thresholdCheck(`sidecar RSS < ${RSS_TARGET_MB} MB with ${settings.manyConnections} concurrent connections`, rss, RSS_TARGET_MB, false,
    many.length === 0 || many.some(m => m.peakRssMb === undefined) ? 'no memory figure (needs Linux /proc)' : undefined)
  const failed = many.reduce((total, m) => total + m.errors + m.non2xx, 0)
  checks.push(failed === 0 ? rssCheck : { ...rssCheck, detail: `${rssCheck.detail}; the phase also had ${failed} failed requests (see its table): the memory figure stands, its rates do not` })
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
    'Latencies in ms, 2xx responses only; CPU µs/req = CPU time of the target\'s own processes (proxy) and of the app, per response.',
  prepare,
  evaluate
}
