import { setTimeout as sleep } from 'node:timers/promises'
import { atMost, cpuPerRequest, ownFigure, pairRatios, roundsOf, rps, thresholdCheck } from '../checks.ts'
import { measureIdle, measureThroughput } from '../load.ts'
import type { BenchContext, Evaluation, PreparedScenario, Ratio, Scenario, TargetResult } from '../scenario.ts'
import { expectGreeting, runRequest, shareServers, sidecarTarget, startBenchServer, startExampleApp } from '../targets.ts'

/**
 * Issue 16: what tracing costs. json-post's call through the sidecar (auth on, a cached token),
 * tracing off against tracing on (every call recorded, parent-based always-on, exported to the
 * local OTLP/HTTP receiver of bench/servers.ts). Targets: ≥ 0.85× the throughput of tracing off;
 * idle RSS within 10 MB of tracing off.
 */
const THROUGHPUT_TARGET = 0.85
const IDLE_RSS_TARGET_MB = 10
const IDLE_SECONDS = 3

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app, receiver }, jwks, token, prepared } = await shareServers(ctx, { app: startExampleApp, receiver: c => startBenchServer(c, 'otlp-receiver') })
  const spansReceived = async (): Promise<number> => ((await (await fetch(`${receiver.origin}/stats`)).json()) as { spans: number }).spans
  const target = (traced: boolean) => sidecarTarget(ctx, {
    id: traced ? 'sidecar-traced' : 'sidecar',
    label: traced ? 'sidecar, tracing on (OTLP/HTTP to a local receiver)' : 'sidecar, tracing off',
    logLevel: 'warn',
    appOrigin: app.origin,
    jwksUrl: jwks.url,
    env: traced ? { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.origin } : {},
    request: origin => runRequest(origin, token),
    checkResponse: expectGreeting,
    running: (_sidecar, request) => ({
      runPhase: async (phase, settings) => {
        const before = await spansReceived()
        const measured = await phase.run(request, settings)
        if (!traced) return measured
        await sleep(5500) // one OTEL_BSP_SCHEDULE_DELAY (5 s) for the last batch to go out
        return { ...measured, extra: { spans: await spansReceived() - before } }
      }
    })
  })
  return prepared([target(false), target(true)])
}

function evaluate (results: TargetResult[]): Evaluation {
  const [throughput] = pairRatios(results, 'throughput', '×', rps, [['traced/off', 'calls/s, tracing on / off', 'sidecar-traced', 'sidecar']]) as [Ratio]
  const [cpu] = pairRatios(results, 'throughput', '×', cpuPerRequest, [['cpu/traced/off', 'sidecar CPU per call, tracing on / off', 'sidecar-traced', 'sidecar']]) as [Ratio]
  const [idleRss] = pairRatios(results, 'idle', 'MB', (x, y) => (x.peakRssMb ?? NaN) - (y.peakRssMb ?? NaN),
    [['idle-rss/traced-off', 'idle RSS, tracing on − off', 'sidecar-traced', 'sidecar']]) as [Ratio]
  const spans = ownFigure('spans-per-call', 'spans exported per call (server, queue, app client)', '×',
    roundsOf(results, 'sidecar-traced', 'throughput'), x => Number(x.extra?.spans ?? NaN) / x.ok)
  return {
    ratios: [throughput, cpu, idleRss, spans],
    checks: [
      thresholdCheck(`tracing on ≥ ${THROUGHPUT_TARGET}× the throughput of tracing off`, throughput, THROUGHPUT_TARGET, true),
      atMost(`idle RSS with tracing on within ${IDLE_RSS_TARGET_MB} MB of tracing off`, idleRss, IDLE_RSS_TARGET_MB)
    ]
  }
}

export const tracingScenario: Scenario = {
  name: 'tracing',
  baselineId: 'sidecar',
  description: 'json-post\'s call through the sidecar, tracing off and on (every call recorded and exported over OTLP/HTTP to a local receiver)',
  phases: [
    { id: 'idle', label: `idle (${IDLE_SECONDS} s at rest after the warm-up, then one call)`, run: async request => await measureIdle(request, IDLE_SECONDS) },
    { id: 'throughput', label: 'max throughput', run: measureThroughput, columns: [{ key: 'spans', label: 'spans exported', combine: 'sum' }] }
  ],
  method: settings =>
    `Idle: ${IDLE_SECONDS} s at rest after the warm-up, then one call; its peak RSS is the idle figure. ` +
    `Max throughput: ${settings.connections} connections, ${settings.durationSeconds} s, the sidecar at LOG_LEVEL=warn with auth on; ` +
    'tracing on exports every call (OTEL_TRACES_SAMPLER default, parent-based always-on, no caller context: each call a new sampled trace) to the OTLP receiver ' +
    '(bench/servers.ts otlp-receiver), which parses each export; its CPU counts with the shared processes. Spans are counted after the phase, one export interval later.',
  prepare,
  evaluate
}
