import { setTimeout as sleep } from 'node:timers/promises'
import { ownFigure, pairedRatio, roundsOf, thresholdCheck } from '../checks.ts'
import { type LoadRequest, measureIdle, measureThroughput } from '../load.ts'
import type { BenchContext, Evaluation, PreparedScenario, RunningTarget, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import { benchAuth, expectGreeting, startBenchServer, type StartedServer, startExampleApp, startSidecarProcess } from '../targets.ts'

/**
 * Issue 16: what tracing costs. json-post's call through the sidecar (auth on, a cached token),
 * tracing off against tracing on (every call recorded, parent-based always-on, exported to a
 * local OTLP/HTTP receiver: bench/otlp-receiver.ts). Targets: ≥ 0.85× the throughput of tracing
 * off; idle RSS within 10 MB of tracing off.
 */
const PROJECT_ID = 'bench'
const APP_NAME = 'app'
const BODY = '{"name":"Ada"}'
const THROUGHPUT_TARGET = 0.85
const IDLE_RSS_TARGET_MB = 10
const IDLE_SECONDS = 3

async function spansReceived (receiver: StartedServer): Promise<number> {
  return ((await (await fetch(`${receiver.origin}/stats`)).json()) as { spans: number }).spans
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const app = await startExampleApp(ctx)
  const receiver = await startBenchServer(ctx, 'otlp-receiver', 'otlp-receiver.ts')
  const { jwks, token } = await benchAuth(PROJECT_ID)

  const target = (traced: boolean): TargetDef => ({
    id: traced ? 'sidecar-traced' : 'sidecar',
    label: traced ? 'sidecar, tracing on (OTLP/HTTP to a local receiver)' : 'sidecar, tracing off',
    start: async (): Promise<RunningTarget> => {
      const sidecar = await startSidecarProcess(ctx, {
        appOrigin: app.origin,
        jwksUrl: jwks.url,
        logLevel: 'warn',
        name: traced ? 'sidecar-traced' : 'sidecar',
        env: { PROJECT_ID, APP_NAME, ...(traced ? { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.origin } : {}) }
      })
      const request: LoadRequest = {
        url: `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/run`,
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: BODY
      }
      return {
        request,
        checkResponse: expectGreeting,
        children: [sidecar.child],
        runPhase: async (phase, settings) => {
          const before = await spansReceived(receiver)
          const measured = await phase.run(request, settings)
          if (!traced) return measured
          await sleep(5500) // one OTEL_BSP_SCHEDULE_DELAY (5 s) for the last batch to go out
          return { ...measured, extra: { spans: await spansReceived(receiver) - before } }
        },
        stop: async () => { await sidecar.child.stop() }
      }
    }
  })

  return {
    targets: [target(false), target(true)],
    children: [app.child, receiver.child],
    close: async () => {
      await app.child.stop()
      await receiver.child.stop()
      await jwks.close()
    }
  }
}

function evaluate (results: TargetResult[]): Evaluation {
  const throughput = pairedRatio('traced/off', 'calls/s, tracing on / off', '×',
    roundsOf(results, 'sidecar-traced', 'throughput'), roundsOf(results, 'sidecar', 'throughput'), (x, y) => x.rps / y.rps)
  const cpu = pairedRatio('cpu/traced/off', 'sidecar CPU per call, tracing on / off', '×',
    roundsOf(results, 'sidecar-traced', 'throughput'), roundsOf(results, 'sidecar', 'throughput'),
    (x, y) => (x.cpu?.targetUsPerRequest ?? NaN) / (y.cpu?.targetUsPerRequest ?? NaN))
  const idleRss = pairedRatio('idle-rss/traced-off', 'idle RSS, tracing on − off', 'MB',
    roundsOf(results, 'sidecar-traced', 'idle'), roundsOf(results, 'sidecar', 'idle'), (x, y) => (x.peakRssMb ?? NaN) - (y.peakRssMb ?? NaN))
  const spans = ownFigure('spans-per-call', 'spans exported per call (server, queue, app client)', '×',
    roundsOf(results, 'sidecar-traced', 'throughput'), x => Number(x.extra?.spans ?? NaN) / x.ok)
  return {
    ratios: [throughput, cpu, idleRss, spans],
    checks: [
      thresholdCheck(`tracing on ≥ ${THROUGHPUT_TARGET}× the throughput of tracing off`, throughput, THROUGHPUT_TARGET, true),
      thresholdCheck(`idle RSS with tracing on within ${IDLE_RSS_TARGET_MB} MB of tracing off`, idleRss, IDLE_RSS_TARGET_MB + 1e-9, false)
    ]
  }
}

export const tracingScenario: Scenario = {
  name: 'tracing',
  baselineId: 'sidecar',
  description: 'json-post\'s call through the sidecar, tracing off and on (every call recorded and exported over OTLP/HTTP to a local receiver)',
  phases: [
    { id: 'idle', label: `idle (${IDLE_SECONDS} s at rest after the warm-up, then one call)`, run: async request => await measureIdle(request, IDLE_SECONDS) },
    {
      id: 'throughput',
      label: 'max throughput',
      run: measureThroughput,
      columns: [{ key: 'spans', label: 'spans exported', combine: 'sum' }]
    }
  ],
  method: settings =>
    `Idle: ${IDLE_SECONDS} s at rest after the warm-up, then one call; its peak RSS is the idle figure. ` +
    `Max throughput: ${settings.connections} connections, ${settings.durationSeconds} s, the sidecar at LOG_LEVEL=warn with auth on; ` +
    'tracing on exports every call (OTEL_TRACES_SAMPLER default, parent-based always-on, no caller context: each call a new sampled trace) to bench/otlp-receiver.ts, ' +
    'which parses each export; its CPU counts with the shared processes. Spans are counted after the phase, one export interval later.',
  prepare,
  evaluate
}
