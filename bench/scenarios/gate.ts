import { scrapeMetrics, sumOf } from '../../test/helpers/admin-metrics.ts'
import { ownFigure, p50Delta, p99Delta, pairRatios, ratioById, roundsOf, thresholdCheck } from '../checks.ts'
import { type LoadRequest, type Measurement, runLoad } from '../load.ts'
import type { BenchContext, Check, Evaluation, LoadPhase, PreparedScenario, Ratio, Scenario, TargetResult } from '../scenario.ts'
import type { BenchSettings } from '../settings.ts'
import { runRequest, shareServers, sidecarTarget, startBenchServer, type StartedServer } from '../targets.ts'

/**
 * Issue 6: with REPLICA_CONCURRENCY=8 and an app that takes 20 ms per call (the slow app of
 * bench/servers.ts), the sidecar keeps the app at ≥ 95% of its 8 slots busy under 200 concurrent
 * callers, and the gate adds under 0.2 ms p99: at a load that never queues (as many callers as
 * slots), the same sidecar with REPLICA_CONCURRENCY=8 vs 0.
 */
const UTILISATION_TARGET = 0.95
const GATE_P99_TARGET_MS = 0.2
/** The sidecar's concurrency gauges average the last 10 s (up to 11 s): the saturated phase fills that window. */
const saturatedSeconds = (settings: BenchSettings): number => Math.max(settings.durationSeconds, 12)

const expectOk = (status: number, body: string): void => {
  if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
  const parsed = JSON.parse(body) as { result?: { ok?: unknown } }
  if (parsed.result?.ok !== true) throw new Error(`unexpected body: ${body.slice(0, 200)}`)
}

interface AppStats { averageConcurrency: number, maxConcurrency: number, calls: number, elapsedMs: number }

/** Resets the app's window, runs the phase, then reads the app's busy slots and the sidecar's own gauges into `extra`. */
async function phaseWithFigures (phase: LoadPhase, request: LoadRequest, settings: BenchSettings, app: StartedServer, adminOrigin: string): Promise<Measurement> {
  await fetch(`${app.origin}/reset`, { method: 'POST' })
  const measured = await phase.run(request, settings)
  const stats = await (await fetch(`${app.origin}/stats`)).json() as AppStats
  const samples = await scrapeMetrics(adminOrigin)
  return {
    ...measured,
    extra: {
      appConcurrency: stats.averageConcurrency,
      appUtilisation: stats.averageConcurrency / settings.gateConcurrency,
      appMaxConcurrency: stats.maxConcurrency,
      sidecarAverageConcurrency: sumOf(samples, 'sidecar_average_concurrency'),
      sidecarUtilisation: sumOf(samples, 'sidecar_concurrency_utilization')
    }
  }
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { settings } = ctx
  // No token is checked (DISABLE_AUTH); the JWKS server only stands in for the store the sidecar would otherwise poll.
  const { servers: { app }, jwks, prepared } = await shareServers(ctx, { app: c => startBenchServer(c, 'slow-app', { HOLD_MS: String(settings.gateHoldMs) }) })
  const target = (concurrency: number) => sidecarTarget(ctx, {
    id: concurrency === 0 ? 'sidecar-no-limit' : 'sidecar-gate',
    label: `sidecar, REPLICA_CONCURRENCY=${concurrency}`,
    ...(concurrency === 0 ? { phases: ['fits'] } : {}),
    name: `sidecar-concurrency-${concurrency}`,
    logLevel: 'warn',
    appOrigin: app.origin,
    jwksUrl: jwks.url,
    env: { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: String(concurrency), QUEUE_DEPTH: String(Math.max(1000, settings.gateCallers * 5)) },
    request: origin => runRequest(origin),
    checkResponse: expectOk,
    running: (sidecar, request) => ({ runPhase: async (phase, s) => await phaseWithFigures(phase, request, s, app, sidecar.adminOrigin) })
  })
  return prepared([target(0), target(settings.gateConcurrency)])
}

function evaluate (results: TargetResult[], settings: BenchSettings): Evaluation {
  const gate = (phaseId: string) => roundsOf(results, 'sidecar-gate', phaseId)
  const capacity = settings.gateConcurrency * 1000 / settings.gateHoldMs
  const ratios: Ratio[] = [
    ...pairRatios(results, 'fits', 'ms', p99Delta, [['gate-p99', `p99 with the gate − without, ${settings.gateConcurrency} callers (never queues)`, 'sidecar-gate', 'sidecar-no-limit']]),
    ...pairRatios(results, 'fits', 'ms', p50Delta, [['gate-p50', `p50 with the gate − without, ${settings.gateConcurrency} callers`, 'sidecar-gate', 'sidecar-no-limit']]),
    ownFigure('app-utilisation', `app's busy slots / ${settings.gateConcurrency} under ${settings.gateCallers} callers (time-weighted, measured by the app)`, '%',
      gate('saturated'), x => x.extra?.appUtilisation ?? NaN),
    ownFigure('calls-vs-capacity', `calls/s under ${settings.gateCallers} callers / ${capacity} (${settings.gateConcurrency} slots ÷ ${settings.gateHoldMs} ms)`, '%',
      gate('saturated'), x => x.rps / capacity),
    ownFigure('sidecar-utilisation', `sidecar_concurrency_utilization scraped at the end of the ${settings.gateCallers}-caller phase`, '%',
      gate('saturated'), x => x.extra?.sidecarUtilisation ?? NaN)
  ]
  const ratio = (id: string): Ratio => ratioById(ratios, id)
  // The gate must never let more calls through than its slots.
  const overLimit = [...gate('fits'), ...gate('saturated')]
    .map(m => m?.extra?.appMaxConcurrency ?? 0).filter(n => n > settings.gateConcurrency)
  const leak = overLimit.length > 0 ? `the app saw ${Math.max(...overLimit)} calls at once, more than REPLICA_CONCURRENCY=${settings.gateConcurrency}` : undefined
  const checks: Check[] = [
    thresholdCheck(`app ≥ ${UTILISATION_TARGET * 100}% of its ${settings.gateConcurrency} slots busy under ${settings.gateCallers} callers`,
      ratio('app-utilisation'), UTILISATION_TARGET, true, leak),
    thresholdCheck(`the gate adds < ${GATE_P99_TARGET_MS} ms p99 (${settings.gateConcurrency} callers, REPLICA_CONCURRENCY=${settings.gateConcurrency} vs 0)`,
      ratio('gate-p99'), GATE_P99_TARGET_MS, false, leak)
  ]
  const notes = [
    `p99 of a ${settings.gateHoldMs} ms call is dominated by the app's timer and the scheduling of four processes on the cores; ` +
      'the gate\'s own cost shows only as the difference of two such figures, made round by round'
  ]
  return { ratios, checks, notes }
}

export const gateScenario: Scenario = {
  name: 'gate',
  baselineId: 'sidecar-no-limit',
  description: 'the concurrency gate: an app that holds each call 20 ms (the slow app of bench/servers.ts), the sidecar with DISABLE_AUTH=true and REPLICA_CONCURRENCY=8 or 0 (no limit)',
  phases: [
    {
      id: 'fits',
      label: 'as many callers as slots (never queues)',
      run: async (request, settings) => await runLoad(request, { connections: settings.gateConcurrency, durationSeconds: settings.durationSeconds }),
      columns: [{ key: 'appConcurrency', label: 'app busy slots', digits: 2 }, { key: 'appMaxConcurrency', label: 'app max', combine: 'max' }]
    },
    {
      id: 'saturated',
      label: 'many callers (queueing at the gate)',
      run: async (request, settings) => await runLoad(request, { connections: settings.gateCallers, durationSeconds: saturatedSeconds(settings) }),
      columns: [
        { key: 'appConcurrency', label: 'app busy slots', digits: 2 },
        { key: 'appMaxConcurrency', label: 'app max', combine: 'max' },
        { key: 'sidecarAverageConcurrency', label: 'sidecar_average_concurrency', digits: 2 },
        { key: 'sidecarUtilisation', label: 'sidecar_concurrency_utilization', digits: 3 }
      ]
    }
  ],
  method: settings =>
    `Autocannon, closed loop: ${settings.gateConcurrency} connections (never more calls than slots), then ${settings.gateCallers} connections ` +
    `(the REPLICA_CONCURRENCY=${settings.gateConcurrency} sidecar only, QUEUE_DEPTH=${Math.max(1000, settings.gateCallers * 5)}; ` +
    `${saturatedSeconds(settings)} s, at least 12, so that the sidecar's gauges, averages over the last 10 s scraped at its end, cover the phase only). ` +
    `The app holds each call ${settings.gateHoldMs} ms and averages its own calls in progress over each phase (app busy slots). ` +
    'Latencies in ms, 2xx only.',
  prepare,
  evaluate
}
