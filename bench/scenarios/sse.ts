import { type Check, type Evaluation, type PreparedScenario, type Ratio, type Scenario, type TargetResult } from '../scenario.ts'
import { ownFigure, pairedRatio, roundsOf, thresholdCheck } from '../checks.ts'
import type { LoadRequest, Measurement } from '../load.ts'
import type { BenchSettings } from '../settings.ts'
import { runStreams } from '../stream-load.ts'
import { benchAuth, nginxSkipReason, serverTarget, startBenchServer, startFloorProxy, startNginx, startSidecarProcess } from '../targets.ts'

/**
 * Issues 3 and 17: events per second and per-event latency through the sidecar vs the app reached
 * directly, with 100 concurrent streams. The app (bench/stream-app.ts) streams NDJSON lines that
 * carry their send time; directly they are read line by line, through the sidecar as the SSE
 * events it makes of them. Targets: ≥ 0.9× direct events/s; p99 added per-event latency ≤ 2 ms
 * at 10,000 events/s. The Node floor and nginx (response buffering off) pass the NDJSON through
 * unchanged: the cost of a plain proxy hop.
 */
const PROJECT_ID = 'bench'
const APP_NAME = 'app'
const EVENTS_RATIO_TARGET = 0.9
const ADDED_P99_TARGET_MS = 2

/** The one-off check: the default stream (10 events at once) arrives whole. */
function expectEvents (sse: boolean) {
  return (status: number, body: string): void => {
    if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
    const lines = body.split('\n').filter(line => sse ? line.startsWith('data: {"i":') : line.startsWith('{"i":'))
    if (lines.length !== 10) throw new Error(`expected 10 events, got ${lines.length}: ${body.slice(0, 300)}`)
  }
}

async function prepare (ctx: Parameters<Scenario['prepare']>[0]): Promise<PreparedScenario> {
  const app = await startBenchServer(ctx, 'stream-app', 'stream-app.ts')
  const { jwks, token } = await benchAuth(PROJECT_ID)
  const ndjson = (origin: string): LoadRequest => ({ url: `${origin}/stream`, method: 'GET', headers: {} })
  const nginxSkip = nginxSkipReason()
  return {
    targets: [
      {
        id: 'direct',
        label: 'direct (stream app, NDJSON)',
        start: async () => ({ request: ndjson(app.origin), checkResponse: expectEvents(false), children: [], stop: async () => {} })
      },
      {
        id: 'floor',
        label: 'the Node floor (NDJSON passed through)',
        start: serverTarget(async () => await startFloorProxy(ctx, app.origin), ndjson, expectEvents(false))
      },
      {
        id: 'sidecar',
        label: 'sidecar (NDJSON → SSE)',
        start: async (bin?: string) => {
          const sidecar = await startSidecarProcess(ctx, {
            appOrigin: app.origin, jwksUrl: jwks.url, logLevel: 'info', env: { PROJECT_ID, APP_NAME }, bin
          })
          return {
            request: {
              url: `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/stream`,
              method: 'GET',
              headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' }
            },
            checkResponse: expectEvents(true),
            children: [sidecar.child],
            notes: ['auth on (a cached token), LOG_LEVEL=info (one line per stream)'],
            stop: async () => { await sidecar.child.stop() }
          }
        }
      },
      {
        id: 'nginx',
        label: 'nginx (NDJSON passed through)',
        ...(nginxSkip === undefined ? {} : { skipReason: nginxSkip }),
        start: serverTarget(async () => await startNginx(ctx, app.port), ndjson, expectEvents(false))
      }
    ],
    children: [app.child],
    close: async () => {
      await app.child.stop()
      await jwks.close()
    }
  }
}

const pacedRate = (settings: BenchSettings): number => settings.sseStreams * 1000 / settings.sseIntervalMs

function evaluate (results: TargetResult[], settings: BenchSettings): Evaluation {
  const rounds = (id: string, phaseId: string): ReturnType<typeof roundsOf> => roundsOf(results, id, phaseId)
  const ratios: Ratio[] = [
    pairedRatio('sidecar/direct', 'sidecar / direct, events/s at max throughput', '×',
      rounds('sidecar', 'throughput'), rounds('direct', 'throughput'), (x, y) => x.rps / y.rps),
    pairedRatio('added-p50/paced', `added per-event latency p50 (sidecar − direct) at ${pacedRate(settings)} events/s`, 'ms',
      rounds('sidecar', 'paced'), rounds('direct', 'paced'), (x, y) => x.p50Ms - y.p50Ms),
    pairedRatio('added-p99/paced', `added per-event latency p99 (sidecar − direct) at ${pacedRate(settings)} events/s`, 'ms',
      rounds('sidecar', 'paced'), rounds('direct', 'paced'), (x, y) => x.p99Ms - y.p99Ms),
    ownFigure('sidecar/paced-rate', 'sidecar events/s in the paced phase / the paced rate', '×', rounds('sidecar', 'paced'),
      x => x.rps / pacedRate(settings))
  ]
  const cpu = (x: Measurement, y: Measurement): number => (x.cpu?.targetUsPerRequest ?? NaN) / (y.cpu?.targetUsPerRequest ?? NaN)
  if (results.some(r => r.id === 'floor' && r.skipped === undefined)) {
    ratios.push(
      pairedRatio('floor/direct', 'the Node floor / direct, events/s at max throughput', '×',
        rounds('floor', 'throughput'), rounds('direct', 'throughput'), (x, y) => x.rps / y.rps),
      pairedRatio('sidecar/floor', 'sidecar / the Node floor, events/s at max throughput', '×',
        rounds('sidecar', 'throughput'), rounds('floor', 'throughput'), (x, y) => x.rps / y.rps),
      pairedRatio('cpu/sidecar/floor', 'CPU per event at max throughput, sidecar / the Node floor (the sidecar also reframes NDJSON as SSE)', '×',
        rounds('sidecar', 'throughput'), rounds('floor', 'throughput'), cpu),
      pairedRatio('floor-added-p99/paced', `the Node floor: added per-event latency p99 (floor − direct) at ${pacedRate(settings)} events/s`, 'ms',
        rounds('floor', 'paced'), rounds('direct', 'paced'), (x, y) => x.p99Ms - y.p99Ms)
    )
  }
  if (results.some(r => r.id === 'nginx' && r.skipped === undefined)) {
    ratios.push(
      pairedRatio('nginx/direct', 'nginx / direct, events/s at max throughput', '×',
        rounds('nginx', 'throughput'), rounds('direct', 'throughput'), (x, y) => x.rps / y.rps),
      pairedRatio('sidecar/nginx', 'sidecar / nginx, events/s at max throughput', '×',
        rounds('sidecar', 'throughput'), rounds('nginx', 'throughput'), (x, y) => x.rps / y.rps),
      pairedRatio('nginx-added-p50/paced', `nginx: added per-event latency p50 (nginx − direct) at ${pacedRate(settings)} events/s`, 'ms',
        rounds('nginx', 'paced'), rounds('direct', 'paced'), (x, y) => x.p50Ms - y.p50Ms),
      pairedRatio('nginx-added-p99/paced', `nginx: added per-event latency p99 (nginx − direct) at ${pacedRate(settings)} events/s`, 'ms',
        rounds('nginx', 'paced'), rounds('direct', 'paced'), (x, y) => x.p99Ms - y.p99Ms),
      pairedRatio('sidecar-nginx-p99/paced', `per-event latency p99, sidecar − nginx at ${pacedRate(settings)} events/s`, 'ms',
        rounds('sidecar', 'paced'), rounds('nginx', 'paced'), (x, y) => x.p99Ms - y.p99Ms),
      pairedRatio('cpu/sidecar/nginx', 'CPU per event at max throughput, sidecar / nginx (the proxy processes alone; the sidecar also reframes NDJSON as SSE)', '×',
        rounds('sidecar', 'throughput'), rounds('nginx', 'throughput'), cpu)
    )
  }
  const ratio = (id: string): Ratio => ratios.find(r => r.id === id) as Ratio
  // The paced phase only measures latency when the events went out at the pace asked for.
  const short = [...rounds('sidecar', 'paced'), ...rounds('direct', 'paced')]
    .filter(m => m !== undefined && m.valid && m.rps < 0.9 * pacedRate(settings))
    .map(m => Math.round(m?.rps ?? 0))
  const checks: Check[] = [
    thresholdCheck(`sidecar ≥ ${EVENTS_RATIO_TARGET}× direct events/s (${settings.sseStreams} streams, no pause)`,
      ratio('sidecar/direct'), EVENTS_RATIO_TARGET, true),
    thresholdCheck(`p99 added per-event latency ≤ ${ADDED_P99_TARGET_MS} ms (${settings.sseStreams} streams × 1 event / ${settings.sseIntervalMs} ms)`,
      ratio('added-p99/paced'), ADDED_P99_TARGET_MS + 1e-9, false,
      short.length > 0 ? `the paced rate was not reached (${short.join(', ')} events/s)` : undefined)
  ]
  return {
    ratios,
    checks,
    notes: ['per-event latency = arrival at the client − the send time the app wrote into the event (one machine, one clock); ' +
      'added latency = sidecar (or nginx) − direct, made round by round. At max events/s the latencies are mostly queueing behind the backlog.',
    'the Node floor and nginx (proxy_buffering off) pass the NDJSON lines through unchanged, read like the app\'s own: a plain proxy hop, where the sidecar also makes SSE events of the lines.']
  }
}

const streamsPhase = (paced: boolean) => async (request: LoadRequest, settings: BenchSettings) =>
  await runStreams(request, { streams: settings.sseStreams, durationSeconds: settings.durationSeconds, intervalMs: paced ? settings.sseIntervalMs : 0 })

const columns = [
  { key: 'eventsPerStream', label: 'events/stream' },
  { key: 'lostEvents', label: 'lost events', combine: 'sum' as const }
]

export const sseScenario: Scenario = {
  name: 'sse',
  baselineId: 'direct',
  description: 'NDJSON streams from a bench app (each line carries its send time), read directly, through the Node floor, as SSE through the sidecar, and through nginx',
  phases: [
    { id: 'throughput', label: 'max events/s (streams without pause)', rateUnit: 'events/s', columns, run: streamsPhase(false) },
    { id: 'paced', label: 'paced streams (per-event latency)', rateUnit: 'events/s', columns, run: streamsPhase(true) }
  ],
  method: settings =>
    `${settings.sseStreams} concurrent streams, each lasting the phase. Max events/s: the app writes events as fast as each ` +
    'connection takes them (yielding to its event loop after each). ' +
    `Paced: each stream one event every ${settings.sseIntervalMs} ms (${pacedRate(settings)} events/s in all), first ticks spread at random. ` +
    'Latencies in ms per event (client arrival − app send time), CPU µs per event.',
  warmUp: async (target, settings) =>
    await runStreams(target.request, { streams: settings.sseStreams, durationSeconds: settings.warmupSeconds, intervalMs: 0 }),
  beforeIds: ['sidecar'],
  prepare,
  evaluate
}
