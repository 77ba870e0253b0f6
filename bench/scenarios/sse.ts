import { atMost, cpuPerRequest, ownFigure, p50Delta, p99Delta, pairRatios, ran, rateNotReached, ratioById, roundsOf, rps, thresholdCheck } from '../checks.ts'
import type { LoadRequest } from '../load.ts'
import type { BenchContext, Evaluation, PreparedScenario, Ratio, Scenario, TargetResult } from '../scenario.ts'
import type { BenchSettings } from '../settings.ts'
import { runStreams } from '../stream-load.ts'
import { APP_NAME, directTarget, PROJECT_ID, proxyTarget, shareServers, sidecarTarget, startBenchServer } from '../targets.ts'

/**
 * Issues 3 and 17: events per second and per-event latency through the sidecar vs the app reached
 * directly, 100 concurrent streams. The stream app (bench/servers.ts) streams NDJSON lines that
 * carry their send time; directly they are read line by line, through the sidecar as the SSE
 * events it makes of them. Targets: ≥ 0.9× direct events/s; p99 added per-event latency ≤ 2 ms at
 * 10,000 events/s. The Node floor and nginx (response buffering off) pass the NDJSON through.
 */
const EVENTS_RATIO_TARGET = 0.9
const ADDED_P99_TARGET_MS = 2

/** The one-off check: the default stream (10 events at once) arrives whole. */
const expectEvents = (sse: boolean) => (status: number, body: string): void => {
  if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
  const lines = body.split('\n').filter(line => line.startsWith(sse ? 'data: {"i":' : '{"i":'))
  if (lines.length !== 10) throw new Error(`expected 10 events, got ${lines.length}: ${body.slice(0, 300)}`)
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app }, jwks, token, prepared } = await shareServers(ctx, { app: c => startBenchServer(c, 'stream-app') })
  const ndjson = (origin: string): LoadRequest => ({ url: `${origin}/stream`, method: 'GET', headers: {} })
  return prepared([
    directTarget('direct', 'direct (stream app, NDJSON)', ndjson(app.origin), expectEvents(false)),
    proxyTarget(ctx, 'floor', 'the Node floor (NDJSON passed through)', app, ndjson, expectEvents(false)),
    sidecarTarget(ctx, {
      id: 'sidecar',
      label: 'sidecar (NDJSON → SSE)',
      name: 'sidecar-info',
      appOrigin: app.origin,
      jwksUrl: jwks.url,
      request: origin => ({ url: `${origin}/v4/${PROJECT_ID}/${APP_NAME}/stream`, method: 'GET', headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } }),
      checkResponse: expectEvents(true),
      notes: ['auth on (a cached token), LOG_LEVEL=info (one line per stream)']
    }),
    proxyTarget(ctx, 'nginx', 'nginx (NDJSON passed through)', app, ndjson, expectEvents(false))
  ])
}

const pacedRate = (settings: BenchSettings): number => settings.sseStreams * 1000 / settings.sseIntervalMs

function evaluate (results: TargetResult[], settings: BenchSettings): Evaluation {
  const rate = pacedRate(settings)
  const max = 'events/s at max throughput'
  const ratios: Ratio[] = [
    ...pairRatios(results, 'throughput', '×', rps, [['sidecar/direct', `sidecar / direct, ${max}`, 'sidecar', 'direct']]),
    ...pairRatios(results, 'paced', 'ms', p50Delta, [['added-p50/paced', `added per-event latency p50 (sidecar − direct) at ${rate} events/s`, 'sidecar', 'direct']]),
    ...pairRatios(results, 'paced', 'ms', p99Delta, [['added-p99/paced', `added per-event latency p99 (sidecar − direct) at ${rate} events/s`, 'sidecar', 'direct']]),
    ownFigure('sidecar/paced-rate', 'sidecar events/s in the paced phase / the paced rate', '×', roundsOf(results, 'sidecar', 'paced'), x => x.rps / rate)
  ]
  if (ran(results, 'floor')) {
    ratios.push(
      ...pairRatios(results, 'throughput', '×', rps, [['floor/direct', `the Node floor / direct, ${max}`, 'floor', 'direct'], ['sidecar/floor', `sidecar / the Node floor, ${max}`, 'sidecar', 'floor']]),
      ...pairRatios(results, 'throughput', '×', cpuPerRequest, [['cpu/sidecar/floor', 'CPU per event at max throughput, sidecar / the Node floor (the sidecar also reframes NDJSON as SSE)', 'sidecar', 'floor']]),
      ...pairRatios(results, 'paced', 'ms', p99Delta, [['floor-added-p99/paced', `the Node floor: added per-event latency p99 (floor − direct) at ${rate} events/s`, 'floor', 'direct']]))
  }
  if (ran(results, 'nginx')) {
    ratios.push(
      ...pairRatios(results, 'throughput', '×', rps, [['nginx/direct', `nginx / direct, ${max}`, 'nginx', 'direct'], ['sidecar/nginx', `sidecar / nginx, ${max}`, 'sidecar', 'nginx']]),
      ...pairRatios(results, 'paced', 'ms', p50Delta, [['nginx-added-p50/paced', `nginx: added per-event latency p50 (nginx − direct) at ${rate} events/s`, 'nginx', 'direct']]),
      ...pairRatios(results, 'paced', 'ms', p99Delta, [['nginx-added-p99/paced', `nginx: added per-event latency p99 (nginx − direct) at ${rate} events/s`, 'nginx', 'direct'],
        ['sidecar-nginx-p99/paced', `per-event latency p99, sidecar − nginx at ${rate} events/s`, 'sidecar', 'nginx']]),
      ...pairRatios(results, 'throughput', '×', cpuPerRequest,
        [['cpu/sidecar/nginx', 'CPU per event at max throughput, sidecar / nginx (the proxy processes alone; the sidecar also reframes NDJSON as SSE)', 'sidecar', 'nginx']]))
  }
  // the paced phase only measures latency when the events went out at the pace asked for
  const short = rateNotReached([...roundsOf(results, 'sidecar', 'paced'), ...roundsOf(results, 'direct', 'paced')], rate, 'events/s')
  return {
    ratios,
    checks: [
      thresholdCheck(`sidecar ≥ ${EVENTS_RATIO_TARGET}× direct events/s (${settings.sseStreams} streams, no pause)`, ratioById(ratios, 'sidecar/direct'), EVENTS_RATIO_TARGET, true),
      atMost(`p99 added per-event latency ≤ ${ADDED_P99_TARGET_MS} ms (${settings.sseStreams} streams × 1 event / ${settings.sseIntervalMs} ms)`,
        ratioById(ratios, 'added-p99/paced'), ADDED_P99_TARGET_MS, short)
    ],
    notes: ['per-event latency = arrival at the client − the send time the app wrote into the event (one machine, one clock); ' +
      'added latency = sidecar (or nginx) − direct, made round by round. At max events/s the latencies are mostly queueing behind the backlog.',
    'the Node floor and nginx (proxy_buffering off) pass the NDJSON lines through unchanged, read like the app\'s own: a plain proxy hop, where the sidecar also makes SSE events of the lines.']
  }
}

const streamsPhase = (paced: boolean) => async (request: LoadRequest, settings: BenchSettings) =>
  await runStreams(request, { streams: settings.sseStreams, durationSeconds: settings.durationSeconds, intervalMs: paced ? settings.sseIntervalMs : 0 })
const columns = [{ key: 'eventsPerStream', label: 'events/stream' }, { key: 'lostEvents', label: 'lost events', combine: 'sum' as const }]

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
  warmUp: async (target, settings) => await runStreams(target.request, { streams: settings.sseStreams, durationSeconds: settings.warmupSeconds, intervalMs: 0 }),
  beforeIds: ['sidecar'],
  prepare,
  evaluate
}
