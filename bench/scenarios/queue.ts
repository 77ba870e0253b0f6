import { setTimeout as sleep } from 'node:timers/promises'
import { builds, ownFigure, roundsOf, thresholdCheck } from '../checks.ts'
import { type Latencies, type LoadRequest, type Measurement, summarize } from '../load.ts'
import type { BenchContext, Evaluation, LoadPhase, PreparedScenario, Ratio, RunningTarget, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import { APP_NAME, PROJECT_ID, shareServers, startBenchServer, startSidecarProcess, type StartedServer } from '../targets.ts'
import { appStats, nowUs, resetApp, type Sidecar, submitAll } from './async-runs.ts'
import { benchRedis } from './bench-redis.ts'

/**
 * Issue 31: priority and fair share under a backlog, and the queue's cost with 100,000 runs
 * waiting. One sidecar (DISABLE_AUTH, callers told apart by X-Forwarded-For) with SLOTS slots in
 * front of the slow app (HOLD_MS a call):
 * - fair: caller A submits BACKLOG async runs, then caller B one; B's wait (submission → its
 *   arrival at the app) in run times (HOLD_MS each): at most 2 (the issue: B's run starts within 2
 *   runs; the runner may hold one of A's runs ahead per slot); first come, first served it would
 *   be BACKLOG ÷ SLOTS;
 * - depth: submissions' cost (202 latency) and runs completed per second with DEEP runs queued,
 *   against SHALLOW: within 10% (the queue O(1) or O(log n) per operation).
 */
const HOLD_MS = 20
const SLOTS = 2
const BACKLOG = 1000
const SHALLOW = 100
const DEEP = 100_000
const FAIR_RUN_TIMES = 2
const DEPTH_TOLERANCE = 0.1
/** Submissions timed at each depth, and the span runs are counted over. */
const TIMED_SUBMISSIONS = 2000
const COMPLETION_SECONDS = 3

/** POSTs `count` async runs as `caller` (20 at a time): the 202s' latencies, and how many were refused. */
async function submitRuns (origin: string, caller: string, count: number, body: () => string): Promise<{ latencies: Latencies, refused: number }> {
  const request: LoadRequest = { url: `${origin}/v4/${PROJECT_ID}/${APP_NAME}/run?async=true`, method: 'POST', headers: { 'x-forwarded-for': caller, 'content-type': 'application/json' } }
  const { latencies, statusCodes } = await submitAll(request, count, body)
  return { latencies, refused: count - (statusCodes[202] ?? 0) }
}

/** Cancels every queued run of the app (DELETE …/_runs?status=queued): the next phase starts from an empty queue. */
async function purge (sidecar: Sidecar): Promise<number> {
  const response = await fetch(`${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/_runs?status=queued`, { method: 'DELETE' })
  return (await response.json() as { canceled: number }).canceled
}

/** Waits until the app has seen `n` calls with a submission stamp (B's), at most 60 s; the lags it recorded (ms). */
async function lagsAtApp (app: StartedServer, n: number): Promise<number[]> {
  for (const deadline = performance.now() + 60_000; performance.now() < deadline; await sleep(20)) {
    const lags = await (await fetch(`${app.origin}/lags`)).json() as number[]
    if (lags.length >= n) return lags
  }
  return []
}

/** A's backlog, then B's one run: B's wait at the app, in ms and in run times. */
async function fairPhase (sidecar: Sidecar, app: StartedServer): Promise<Measurement> {
  await resetApp(app)
  const a = await submitRuns(sidecar.origin, '10.0.0.1', BACKLOG, () => '{}')
  const b = await submitRuns(sidecar.origin, '10.0.0.2', 1, () => `{"t":${Math.round(nowUs())}}`)
  const [waitMs] = await lagsAtApp(app, 1)
  const left = await purge(sidecar)
  const measured = summarize(Float64Array.from(waitMs === undefined ? [] : [waitMs]), {
    ok: waitMs === undefined ? 0 : 1, errors: a.refused + b.refused, timeouts: 0, non2xx: 0, statusCodes: {}, durationSeconds: 1, connections: 20
  })
  return { ...measured, extra: { bWaitMs: waitMs ?? NaN, bWaitRuns: (waitMs ?? NaN) / HOLD_MS, aLeftQueued: left } }
}

/** With `depth` runs queued: the next TIMED_SUBMISSIONS submissions' latency, and the runs the app completes a second. */
async function depthFigures (sidecar: Sidecar, app: StartedServer, depth: number): Promise<{ submitP50Ms: number, submitMeanMs: number, runsPerSecond: number, refused: number }> {
  const fill = await submitRuns(sidecar.origin, '10.0.0.1', depth, () => '{}')
  const timed = await submitRuns(sidecar.origin, '10.0.0.3', TIMED_SUBMISSIONS, () => '{}')
  await resetApp(app)
  await sleep(COMPLETION_SECONDS * 1000)
  const window = await appStats(app)
  await purge(sidecar)
  const submitted = summarize(timed.latencies, { ok: 0, errors: 0, timeouts: 0, non2xx: 0, statusCodes: {}, durationSeconds: 0, connections: 20 })
  return { submitP50Ms: submitted.p50Ms, submitMeanMs: submitted.meanMs, runsPerSecond: window.calls / (window.elapsedMs / 1000), refused: fill.refused + timed.refused }
}

async function depthPhase (sidecar: Sidecar, app: StartedServer): Promise<Measurement> {
  const shallow = await depthFigures(sidecar, app, SHALLOW)
  const deep = await depthFigures(sidecar, app, DEEP)
  const measured = summarize(Float64Array.from([deep.submitP50Ms]), {
    ok: 1, errors: shallow.refused + deep.refused, timeouts: 0, non2xx: 0, statusCodes: {}, durationSeconds: 1, connections: 20
  })
  return {
    ...measured,
    extra: {
      submitP50ShallowMs: shallow.submitP50Ms,
      submitP50DeepMs: deep.submitP50Ms,
      submitMeanShallowMs: shallow.submitMeanMs,
      submitMeanDeepMs: deep.submitMeanMs,
      runsPerSecondShallow: shallow.runsPerSecond,
      runsPerSecondDeep: deep.runsPerSecond,
      submitDeepOverShallow: deep.submitMeanMs / shallow.submitMeanMs,
      runsDeepOverShallow: deep.runsPerSecond / shallow.runsPerSecond
    }
  }
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { slowApp }, jwks, prepared } = await shareServers(ctx, { slowApp: c => startBenchServer(c, 'slow-app', { HOLD_MS: String(HOLD_MS) }) })
  const redis = await benchRedis(ctx)
  const target = (id: string, label: string, shared: boolean): TargetDef => ({
    id,
    label,
    phases: ['fair', 'depth'],
    ...(shared && 'skip' in redis ? { skipReason: redis.skip } : {}),
    start: async (bin?: string): Promise<RunningTarget> => {
      if (shared && !('skip' in redis)) await redis.flush()
      const sidecar = await startSidecarProcess(ctx, {
        appOrigin: slowApp.origin,
        jwksUrl: jwks.url,
        logLevel: 'warn',
        name: id,
        bin,
        env: {
          DISABLE_AUTH: 'true', PROJECT_ID, APP_NAME, REPLICA_CONCURRENCY: String(SLOTS), ASYNC_QUEUE_DEPTH: String(DEEP * 2),
          ...(shared && !('skip' in redis) ? { RUN_STORE_URL: redis.url } : {})
        }
      })
      const request: LoadRequest = { url: `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/run`, method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }
      return {
        request,
        checkResponse: status => { if (status !== 200) throw new Error(`expected 200, got ${status}`) },
        runPhase: async phase => phase.id === 'fair' ? await fairPhase(sidecar, slowApp) : await depthPhase(sidecar, slowApp),
        children: [sidecar.child],
        stop: async () => { await sidecar.child.stop() }
      }
    }
  })
  const scenario = prepared([target('queue-memory', 'one sidecar, run store in memory', false), target('queue-redis', 'one sidecar, run store in Redis', true)])
  return 'skip' in redis ? scenario : redis.prepared(scenario)
}

function evaluate (results: TargetResult[]): Evaluation {
  const figures = (backend: string, suffix: string, label: string): Ratio[] => [
    ownFigure(`b-wait-${backend}${suffix}`, `caller B's one run behind caller A's ${BACKLOG}: its wait in run times (${HOLD_MS} ms each; first come, first served: ${BACKLOG / SLOTS}), ${backend}${label}`, '/run',
      roundsOf(results, `queue-${backend}${suffix}`, 'fair'), x => x.extra?.bWaitRuns ?? NaN),
    ownFigure(`submit-depth-${backend}${suffix}`, `submission latency (mean) with ${DEEP.toLocaleString('en-US')} runs queued ÷ with ${SHALLOW}, ${backend}${label}`, '×',
      roundsOf(results, `queue-${backend}${suffix}`, 'depth'), x => x.extra?.submitDeepOverShallow ?? NaN),
    ownFigure(`take-depth-${backend}${suffix}`, `runs completed/s with ${DEEP.toLocaleString('en-US')} runs queued ÷ with ${SHALLOW}, ${backend}${label}`, '×',
      roundsOf(results, `queue-${backend}${suffix}`, 'depth'), x => x.extra?.runsDeepOverShallow ?? NaN)
  ]
  const BACKENDS = ['memory', 'redis']
  const ratios = BACKENDS.flatMap(backend => builds(results, `queue-${backend}`).flatMap(b => figures(backend, b.suffix, b.label)))
  const now = (id: string): Ratio => ratios.find(r => r.id === id) ?? { id, label: id, unit: '×', value: null }
  return {
    ratios,
    checks: BACKENDS.flatMap(backend => [
      thresholdCheck(`caller B waits ≤ ${FAIR_RUN_TIMES} run times behind A's ${BACKLOG} (${backend})`, now(`b-wait-${backend}`), FAIR_RUN_TIMES, false),
      thresholdCheck(`submissions with ${DEEP.toLocaleString('en-US')} queued within ${DEPTH_TOLERANCE * 100}% of ${SHALLOW} (${backend})`, now(`submit-depth-${backend}`), 1 + DEPTH_TOLERANCE, false),
      thresholdCheck(`runs/s with ${DEEP.toLocaleString('en-US')} queued within ${DEPTH_TOLERANCE * 100}% of ${SHALLOW} (${backend})`, now(`take-depth-${backend}`), 1 - DEPTH_TOLERANCE, true)
    ]),
    notes: [`the sidecar runs ${SLOTS} at once against an app holding each call ${HOLD_MS} ms (a run time); with BENCH_BEFORE_BIN, the Redis target also runs the older build (queue-redis-before)`]
  }
}

/** A phase measured by its targets' own `runPhase`. */
const ownPhase = (id: string, label: string, rateUnit: string): LoadPhase =>
  ({ id, label, rateUnit, run: async () => { throw new Error(`the ${id} phase runs through its target`) } })

export const queueScenario: Scenario = {
  name: 'queue',
  baselineId: 'queue-memory',
  beforeIds: ['queue-redis'],
  description: `fair share and deep queues: caller B's one async run behind caller A's ${BACKLOG}, and the queue's cost with ${DEEP.toLocaleString('en-US')} runs waiting against ${SHALLOW}`,
  phases: [
    { ...ownPhase('fair', `caller A's ${BACKLOG} async runs, then caller B's one (latency: B's submission → its arrival at the app)`, 'runs'),
      columns: [{ key: 'bWaitMs', label: 'B waited ms', digits: 1 }, { key: 'bWaitRuns', label: 'B waited, run times', digits: 2 }, { key: 'aLeftQueued', label: 'A\'s runs still queued' }] },
    { ...ownPhase('depth', `${SHALLOW} then ${DEEP.toLocaleString('en-US')} runs queued: ${TIMED_SUBMISSIONS} submissions timed, runs/s at the app over ${COMPLETION_SECONDS} s`, 'runs'),
      columns: [{ key: 'submitMeanShallowMs', label: `submit mean ms, ${SHALLOW} queued`, digits: 2 }, { key: 'submitMeanDeepMs', label: `submit mean ms, ${DEEP} queued`, digits: 2 },
        { key: 'runsPerSecondShallow', label: `runs/s, ${SHALLOW} queued`, digits: 1 }, { key: 'runsPerSecondDeep', label: `runs/s, ${DEEP} queued`, digits: 1 }] }
  ],
  method: () =>
    `One sidecar, DISABLE_AUTH=true, REPLICA_CONCURRENCY=${SLOTS}, ASYNC_QUEUE_DEPTH=${DEEP * 2}, in front of an app holding each call ${HOLD_MS} ms; callers told apart by X-Forwarded-For. ` +
    `Fair: caller A submits ${BACKLOG} async runs (20 at a time), then caller B one, stamped with its send time; the app records B's arrival − stamp. ` +
    `Depth: the queue filled to ${SHALLOW}, then to ${DEEP.toLocaleString('en-US')}; at each, ${TIMED_SUBMISSIONS} more submissions timed (202 latency) and the app's calls counted over ${COMPLETION_SECONDS} s. ` +
    'Between phases every queued run is canceled (DELETE …/_runs?status=queued).',
  prepare,
  evaluate,
  warmUp: async () => undefined
}
