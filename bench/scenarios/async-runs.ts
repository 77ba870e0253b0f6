import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { scrapeMetrics, sumOf } from '../../test/helpers/admin-metrics.ts'
import { Latencies, type LoadRequest, type Measurement, summarize } from '../load.ts'
import { runPaced } from '../paced-load.ts'
import { APP_NAME, GREETING_BODY, PROJECT_ID, type StartedServer, type StartedSidecar } from '../targets.ts'
import type { BenchRedis } from './bench-redis.ts'

/**
 * The async scenario's runs at the slow app (bench/servers.ts `slow-app`, HOLD_MS a call, counting
 * its own calls in progress): the completion phase with a backlog (runs/s, slot utilisation at the
 * app) and the paced phase (submit → app latency below capacity, and what the runs cost the Redis);
 * what the other phases share. A Fleet is a sidecar fleet or the BullMQ peer (async-bullmq.ts).
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

/** Waits until the fleet counted `runs` more succeeded runs than `before` (at most `timeoutMs`); returns how many it did and the reads it took. */
export async function runsSucceeded (fleet: Fleet, before: number, runs: number, timeoutMs = 120_000): Promise<{ done: number, reads: number }> {
  let [done, reads] = [0, 0]
  for (const deadline = performance.now() + timeoutMs; performance.now() < deadline; await sleep(10)) {
    reads++
    done = await fleet.succeeded() - before
    if (done >= runs) break
  }
  return { done, reads }
}

interface AppStats { averageConcurrency: number, maxConcurrency: number, calls: number, elapsedMs: number }
/** The slow app's counters since its last reset. */
export const appStats = async (app: StartedServer): Promise<AppStats> => await (await fetch(`${app.origin}/stats`)).json() as AppStats
export const resetApp = async (app: StartedServer): Promise<void> => { await (await fetch(`${app.origin}/reset`, { method: 'POST' })).arrayBuffer() }

/** Processes sharing one Redis that take runs and run them at the slow app: sidecars, or the BullMQ peer's workers. */
export interface Fleet {
  /** Runs at once at the app, all processes together (sidecars × REPLICA_CONCURRENCY; workers × concurrency). */
  readonly slots: number
  /** The processes holding Redis connections (the idle traffic is per process). */
  readonly processes: number
  readonly app: StartedServer
  /** An async submission (to the first sidecar; to the BullMQ producer). */
  readonly submit: LoadRequest
  /** Runs ended as succeeded so far (the end written), all processes together. */
  succeeded: () => Promise<number>
  /** Resolves when no run is queued or running (the warm-up's ended). */
  settled: () => Promise<void>
  /** Keys that stop growing at a length cap (BullMQ's events stream): left out of the bytes kept per run, which a run keeps for its retention. */
  readonly cappedKeys: string[]
}

/** Sidecars of one app sharing the Redis run store in front of the slow app, `slotsEach` each (REPLICA_CONCURRENCY), submitted to the first. */
export const sidecarFleet = (sidecars: Sidecar[], slotsEach: number, app: StartedServer, submit: LoadRequest): Fleet => ({
  slots: sidecars.length * slotsEach,
  processes: sidecars.length,
  app,
  submit,
  succeeded: async () => await succeededRuns(sidecars),
  settled: async () => { await settled(sidecars) },
  cappedKeys: []
})

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
  const { app, slots } = fleet
  await fleet.settled()
  const before = await fleet.succeeded()
  const runs = Math.round(slots * 1000 / HOLD_MS * (durationSeconds * 1.2 + 2))
  const startedAt = performance.now()
  const { latencies, statusCodes } = await submitAll(fleet.submit, runs)
  const accepted = statusCodes[202] ?? 0
  await resetApp(app)
  await sleep(durationSeconds * 1000)
  const window = await appStats(app)
  const doneInWindow = await fleet.succeeded() - before
  // started ≤ succeeded + slots: more than that accepted means some never started, so the queue was never empty
  const backlogLeft = accepted - doneInWindow - slots
  const { done } = await runsSucceeded(fleet, before, accepted)
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
 * Submit → app below capacity: PACED_RATE async runs a second, evenly paced, to the fleet's
 * submission, each body `{"t": <epoch µs when sent>}`; the app records arrival − t (one clock).
 * Latencies: those; extra: the submissions' own p50/p99 (the 202). With `redis`, also what the runs
 * cost it, measured here because the commands phase's MONITOR has the server format every command
 * once more: its CPU seconds from the first submission until the fleet counted every run ended, ÷
 * runs; and the bytes kept per finished run (used_memory at rest after − before, ÷ runs), the
 * growth of the fleet's capped keys left out (and given apart): at 100 runs/s for an hour they are
 * full, whatever the phase's length.
 */
export async function pacedPhase (fleet: Fleet, durationSeconds: number, redis?: BenchRedis): Promise<Measurement> {
  const { app } = fleet
  await fleet.settled()
  await resetApp(app)
  const before = await fleet.succeeded()
  const cappedBytes = async (store: BenchRedis): Promise<number> => (await Promise.all(fleet.cappedKeys.map(async key => await store.keyBytes(key)))).reduce((a, b) => a + b, 0)
  const memoryBefore = redis === undefined ? undefined : { used: await redis.usedMemoryAtRest(), capped: await cappedBytes(redis) }
  const cpuBefore = redis?.cpuSeconds()
  const submitted = await runPaced(fleet.submit, PACED_RATE, durationSeconds, () => `{"t":${Math.round(nowUs())}}`)
  let lags: number[] = []
  for (const deadline = performance.now() + 60_000; performance.now() < deadline; await sleep(50)) {
    lags = await (await fetch(`${app.origin}/lags`)).json() as number[]
    if (lags.length >= submitted.ok) break
  }
  const { done } = await runsSucceeded(fleet, before, submitted.ok)
  const cpuAfter = redis?.cpuSeconds()
  const memoryAfter = redis === undefined ? undefined : { used: await redis.usedMemoryAtRest(), capped: await cappedBytes(redis) }
  const runs = Math.max(1, done)
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
  return {
    ...measured,
    valid: measured.valid && lags.length === submitted.ok && done === submitted.ok,
    extra: {
      submitP50Ms: submitted.p50Ms,
      submitP99Ms: submitted.p99Ms,
      ...(cpuBefore === undefined || cpuAfter === undefined ? {} : { redisCpuUsPerRun: (cpuAfter - cpuBefore) / runs * 1e6 }),
      ...(memoryBefore === undefined || memoryAfter === undefined
        ? {}
        : {
            redisBytesPerRun: (memoryAfter.used - memoryAfter.capped - memoryBefore.used + memoryBefore.capped) / runs,
            ...(fleet.cappedKeys.length === 0 ? {} : { redisCappedBytesPerRun: (memoryAfter.capped - memoryBefore.capped) / runs })
          })
    }
  }
}
