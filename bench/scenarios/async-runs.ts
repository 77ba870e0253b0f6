import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { scrapeMetrics, sumOf } from '../../test/helpers/admin-metrics.ts'
import { Latencies, type LoadRequest, type Measurement, summarize } from '../load.ts'
import { runPaced } from '../paced-load.ts'
import { APP_NAME, GREETING_BODY, PROJECT_ID, type StartedServer, type StartedSidecar } from '../targets.ts'

/**
 * The async scenario's runs at the slow app (bench/servers.ts `slow-app`, HOLD_MS a call, counting
 * its own calls in progress): the completion phase with a backlog (runs/s, slot utilisation at the
 * app) and the paced phase (submit → app latency below capacity); what the other phases share.
 */
export type Sidecar = StartedSidecar

/** The slow app's hold per call. */
export const HOLD_MS = 20
/** The paced phases' submissions per second (half of 4 slots' capacity at HOLD_MS). */
export const PACED_RATE = 100

export const first = (sidecars: Sidecar[]): Sidecar => sidecars[0] as Sidecar
export const runsUrl = (sidecar: Sidecar, path: string): string => `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/${path}`
export const nowUs = (): number => (performance.timeOrigin + performance.now()) * 1000

/** Runs the sidecars counted as succeeded (sidecar_runs_total; note that a /metrics read asks the run store for its queue gauges). */
export async function succeededRuns (sidecars: Sidecar[]): Promise<number> {
  let total = 0
  for (const sidecar of sidecars) total += sumOf(await scrapeMetrics(sidecar.adminOrigin), 'sidecar_runs_total', { status: 'succeeded' })
  return total
}

/** Waits until no run is queued or running on any of the sidecars (the warm-up's runs ended). */
export async function settled (sidecars: Sidecar[]): Promise<void> {
  for (const deadline = performance.now() + 60_000; performance.now() < deadline; await sleep(20)) {
    let busy = 0
    for (const sidecar of sidecars) {
      const samples = await scrapeMetrics(sidecar.adminOrigin)
      busy += sumOf(samples, 'sidecar_async_queued_runs') + sumOf(samples, 'sidecar_inflight_requests')
    }
    if (busy === 0) return
  }
  throw new Error('the sidecars did not settle within 60 s')
}

/** Waits until the sidecars counted `runs` more succeeded runs than `before` (at most `timeoutMs`); returns how many they did and the /metrics reads it took. */
export async function runsSucceeded (sidecars: Sidecar[], before: number, runs: number, timeoutMs = 120_000): Promise<{ done: number, reads: number }> {
  let [done, reads] = [0, 0]
  for (const deadline = performance.now() + timeoutMs; performance.now() < deadline; await sleep(10)) {
    reads++
    done = await succeededRuns(sidecars) - before
    if (done >= runs) break
  }
  return { done, reads }
}

interface AppStats { averageConcurrency: number, maxConcurrency: number, calls: number, elapsedMs: number }
/** The slow app's counters since its last reset. */
export const appStats = async (app: StartedServer): Promise<AppStats> => await (await fetch(`${app.origin}/stats`)).json() as AppStats
export const resetApp = async (app: StartedServer): Promise<void> => { await (await fetch(`${app.origin}/reset`, { method: 'POST' })).arrayBuffer() }

/** Sidecars of one app sharing the Redis run store in front of the slow app, `slots` each (REPLICA_CONCURRENCY). */
export interface Fleet {
  readonly sidecars: Sidecar[]
  readonly slotsEach: number
  readonly app: StartedServer
  /** An async submission to the first sidecar. */
  readonly submit: LoadRequest
}

/** Submits `runs` async runs to `request`'s sidecar, 20 at a time (each `body()`, else the request's); their latencies (202s only) and status codes. */
export async function submitAll (request: LoadRequest, runs: number, body?: () => string): Promise<{ latencies: Latencies, statusCodes: Record<string, number> }> {
  const latencies = new Latencies()
  const statusCodes: Record<string, number> = {}
  const agent = new http.Agent({ keepAlive: true, maxSockets: 20 })
  const url = new URL(request.url)
  let next = 0
  const submitOne = async (): Promise<void> => {
    while (next < runs) {
      next++
      const sentAt = performance.now()
      const status = await new Promise<number>(resolve => {
        const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: 'POST', headers: request.headers, agent }, res => {
          res.resume()
          res.once('end', () => { resolve(res.statusCode ?? 0) })
        })
        req.once('error', () => { resolve(0) })
        req.end(body?.() ?? request.body ?? GREETING_BODY)
      })
      statusCodes[status] = (statusCodes[status] ?? 0) + 1
      if (status === 202) latencies.push(performance.now() - sentAt)
    }
  }
  await Promise.all(Array.from({ length: Math.min(20, runs) }, submitOne))
  agent.destroy()
  return { latencies, statusCodes }
}

/**
 * Runs completed with a backlog: enough runs for the phase and more (every slot busy for
 * `durationSeconds` × 1.2 + 2 s) submitted at once to the first sidecar; then, for
 * `durationSeconds`, the app's own count of its calls in progress: slot utilisation = ∫ in-flight
 * dt ÷ (slots × span). Valid only when runs were still queued at the window's end (the backlog
 * never ran out) and all of them succeeded. Rate: runs ÷ (first submission → the last one
 * succeeded), as issue 14 timed it; latencies: the submissions'.
 */
export async function completionPhase (fleet: Fleet, durationSeconds: number): Promise<Measurement> {
  const { sidecars, app } = fleet
  const slots = sidecars.length * fleet.slotsEach
  await settled(sidecars)
  const before = await succeededRuns(sidecars)
  const runs = Math.round(slots * 1000 / HOLD_MS * (durationSeconds * 1.2 + 2))
  const startedAt = performance.now()
  const { latencies, statusCodes } = await submitAll(fleet.submit, runs)
  const accepted = statusCodes[202] ?? 0
  await resetApp(app)
  await sleep(durationSeconds * 1000)
  const window = await appStats(app)
  const doneInWindow = await succeededRuns(sidecars) - before
  // started ≤ succeeded + slots: more than that accepted means some never started, so the queue was never empty
  const backlogLeft = accepted - doneInWindow - slots
  const { done } = await runsSucceeded(sidecars, before, accepted)
  const seconds = (performance.now() - startedAt) / 1000
  const measured = summarize(latencies, {
    ok: done, errors: 0, timeouts: 0, non2xx: runs - accepted, statusCodes, durationSeconds: seconds, connections: 20
  })
  return {
    ...measured,
    valid: measured.valid && done === accepted && backlogLeft > 0,
    extra: {
      runs: accepted,
      completed: done,
      utilisation: window.averageConcurrency / slots,
      windowRunsPerSecond: window.calls / (window.elapsedMs / 1000),
      mostAtOnce: window.maxConcurrency,
      backlogLeft: Math.max(0, backlogLeft)
    }
  }
}

/**
 * Submit → app below capacity: PACED_RATE async runs a second, evenly paced, to the first
 * sidecar, each body `{"t": <epoch µs when sent>}`; the app records arrival − t (one clock).
 * Latencies: those; extra: the submissions' own p50/p99 (the 202).
 */
export async function pacedPhase (fleet: Fleet, durationSeconds: number): Promise<Measurement> {
  const { sidecars, app } = fleet
  await settled(sidecars)
  await resetApp(app)
  const submitted = await runPaced(fleet.submit, PACED_RATE, durationSeconds, () => `{"t":${Math.round(nowUs())}}`)
  let lags: number[] = []
  for (const deadline = performance.now() + 60_000; performance.now() < deadline; await sleep(50)) {
    lags = await (await fetch(`${app.origin}/lags`)).json() as number[]
    if (lags.length >= submitted.ok) break
  }
  const measured = summarize(Float64Array.from(lags), {
    ok: lags.length,
    errors: submitted.errors,
    timeouts: submitted.timeouts,
    non2xx: submitted.non2xx,
    statusCodes: submitted.statusCodes,
    durationSeconds: submitted.durationSeconds,
    connections: submitted.connections,
    targetRate: PACED_RATE
  })
  return { ...measured, valid: measured.valid && lags.length === submitted.ok, extra: { submitP50Ms: submitted.p50Ms, submitP99Ms: submitted.p99Ms } }
}
