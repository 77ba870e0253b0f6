import autocannon from 'autocannon'
import type { BenchSettings } from './settings.ts'

/** What every load phase sends: one request, repeated. */
export interface LoadRequest {
  /** Full URL, path included. */
  readonly url: string
  readonly method: 'GET' | 'POST' | 'PUT'
  readonly headers: Record<string, string>
  readonly body?: string
}

/** One phase on one target. Latencies are milliseconds; a measurement with `valid: false` is not a number to quote. */
export interface Measurement {
  /** 2xx responses per second over the phase. */
  readonly rps: number
  readonly p50Ms: number
  readonly p90Ms: number
  readonly p99Ms: number
  readonly maxMs: number
  readonly meanMs: number
  /** 2xx responses. */
  readonly ok: number
  /** Connection errors (timeouts included). */
  readonly errors: number
  readonly timeouts: number
  readonly non2xx: number
  readonly statusCodes: Record<string, number>
  readonly durationSeconds: number
  readonly connections: number
  /** Requests/s asked for (fixed-rate phases only). */
  readonly targetRate?: number
  /** False when any request failed: errors, timeouts or non-2xx responses. */
  readonly valid: boolean
  /** CPU used during the phase (Linux only), filled in by run.ts. */
  cpu?: CpuUse
  /**
   * Peak resident memory of the target's own processes during the phase, MB = 10⁶ bytes (Linux only; the
   * sum over its processes; undefined for a target with no process of its own), filled in by run.ts.
   */
  peakRssMb?: number
  /** False when the kernel refused to reset the peak mark: `peakRssMb` is then the peak since the process started. */
  peakRssPhaseOnly?: boolean
  /** Combined measurements only: how many rounds the figures come from (see aggregate.ts). */
  roundsUsed?: number
  /** Combined measurements only: no round was quiet, the figures are disturbed by other load. */
  disturbed?: boolean
  /** A scenario's own figures for this phase (webhooks delivered, the app's busy slots, …); see LoadPhase.columns. */
  extra?: Record<string, number>
}

/** CPU seconds used during one phase: the target's own processes, the shared app, the load generator. */
export interface CpuUse {
  /** The target's own processes (proxy, sidecar, nginx); null for `direct`. */
  readonly targetSeconds: number | null
  readonly appSeconds: number | null
  readonly loadGeneratorSeconds: number
  /** targetSeconds per 2xx response, in microseconds (÷ 1000: CPU seconds per 1,000 requests = vCPU per 1,000 req/s). */
  readonly targetUsPerRequest: number | null
  /** targetSeconds per second of the phase: the cores' worth of CPU the target's processes used (vCPU). */
  readonly targetCoresUsed?: number | null
  readonly appUsPerRequest: number | null
  /** Cores' worth of CPU used meanwhile by everything else on the machine (noise; kernel network work may show here too). */
  readonly backgroundCores: number | null
  /** CPU seconds per process name (`load generator` is the bench process). */
  readonly byProcess: Record<string, number>
}

export interface LoadOptions {
  connections: number
  durationSeconds: number
  /** Requests/s over all connections; undefined: as fast as the target answers. */
  overallRate?: number
  /**
   * Gives every request its own `X-Request-Id` (`<prefix><n>`; or another `header`) and reports each 2xx response's
   * `X-Request-Id` header to `onAnswered` (autocannon rebuilds each request: a little more load-generator CPU).
   */
  requestIds?: { prefix: string, onIssued?: (id: string) => void, onAnswered?: (id: string) => void, header?: string }
}

/**
 * Runs autocannon against `request`. Latency percentiles are computed here from autocannon's
 * per-response hrtime durations (2xx only) rather than from its histogram, which has 1 ms
 * resolution and adds coordinated-omission samples at a fixed rate: sub-millisecond differences
 * between targets are the point of this bench.
 */
export async function runLoad (request: LoadRequest, options: LoadOptions): Promise<Measurement> {
  const latencies = new Latencies()
  let finish: (error: unknown, result: autocannon.Result) => void = () => {}
  const done = new Promise<autocannon.Result>((resolve, reject) => {
    finish = (error, result) => { if (error === null || error === undefined) resolve(result); else reject(error as Error) }
  })
  const instance = autocannon({
    url: request.url,
    method: request.method,
    headers: request.headers,
    ...(request.body === undefined ? {} : { body: request.body }),
    connections: options.connections,
    pipelining: 1,
    duration: options.durationSeconds,
    timeout: 10,
    ...(options.overallRate === undefined ? {} : { overallRate: options.overallRate }),
    ...(options.requestIds === undefined ? {} : { requests: [uniqueIdRequest(options.requestIds)] })
  }, (error, result) => { finish(error, result) })
  instance.on('response', (_client, statusCode, _bytes, responseTime) => {
    if (statusCode < 200 || statusCode >= 300) return
    latencies.push(responseTime)
  })
  const result = await done
  const statusCodes: Record<string, number> = {}
  for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) statusCodes[code] = stat.count ?? 0
  return summarize(latencies.values.subarray(0, latencies.count), {
    ok: result['2xx'],
    errors: result.errors,
    timeouts: result.timeouts,
    non2xx: result.non2xx,
    statusCodes,
    durationSeconds: result.duration,
    connections: options.connections,
    ...(options.overallRate === undefined ? {} : { targetRate: options.overallRate })
  })
}

function uniqueIdRequest (ids: NonNullable<LoadOptions['requestIds']>): autocannon.Request {
  let next = 0
  return {
    setupRequest: request => {
      const id = `${ids.prefix}${next++}`
      request.headers = { ...request.headers, [ids.header ?? 'x-request-id']: id }
      ids.onIssued?.(id)
      return request
    },
    onResponse: (status, _body, _context, headers) => {
      if (status < 200 || status >= 300 || ids.onAnswered === undefined) return
      for (const [name, value] of Object.entries(headers ?? {})) {
        if (name.length === 12 && name.toLowerCase() === 'x-request-id' && typeof value === 'string') { ids.onAnswered(value); return }
      }
    }
  }
}

/** A growing list of latencies (ms), for the load generators that time each response themselves. */
export class Latencies {
  values = new Float64Array(1 << 16)
  count = 0
  push (value: number): void {
    if (this.count === this.values.length) {
      const grown = new Float64Array(this.values.length * 2)
      grown.set(this.values)
      this.values = grown
    }
    this.values[this.count++] = value
  }
}

/** The counts a load generator reports; `summarize` adds the latency statistics. */
export type LoadCounts = Pick<Measurement, 'ok' | 'errors' | 'timeouts' | 'non2xx' | 'statusCodes' | 'durationSeconds' | 'connections' | 'targetRate'>

/** A Measurement from 2xx latencies (ms, any order; sorted in place) and the counts. */
export function summarize (latencies: Float64Array, counts: LoadCounts): Measurement {
  const sorted = latencies.sort()
  const count = sorted.length
  let sum = 0
  for (const value of sorted) sum += value
  return {
    rps: counts.durationSeconds > 0 ? counts.ok / counts.durationSeconds : 0,
    p50Ms: percentile(sorted, 50),
    p90Ms: percentile(sorted, 90),
    p99Ms: percentile(sorted, 99),
    maxMs: count === 0 ? NaN : sorted[count - 1] as number,
    meanMs: count === 0 ? NaN : sum / count,
    ...counts,
    valid: counts.ok > 0 && counts.errors === 0 && counts.timeouts === 0 && counts.non2xx === 0
  }
}

/** Nearest-rank percentile of an ascending array; NaN when empty. */
export function percentile (sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number
}

/** As fast as the target answers: `connections` connections, pipelining 1. */
export async function measureThroughput (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runLoad(request, { connections: settings.connections, durationSeconds: settings.durationSeconds })
}

/** As fast as the target answers over many connections at once (`manyConnections`, default 1,000): what holding them costs. */
export async function measureManyConnections (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runLoad(request, { connections: settings.manyConnections, durationSeconds: settings.durationSeconds })
}

/**
 * A fixed overall rate (autocannon `overallRate`). Note autocannon's limiter: each connection gets
 * a budget of rate/connections requests per second and spends it back to back, then waits for the
 * next second; so the load comes in bursts at up to `rateConnections` concurrent requests.
 */
export async function measureFixedRate (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runLoad(request, { connections: settings.rateConnections, durationSeconds: settings.durationSeconds, overallRate: settings.rate })
}

/** Warm-up load (results discarded): token caches, keep-alive pools, JIT. */
/**
 * At rest for `seconds`, then one request: the phase's peak RSS is the target's idle figure
 * (before the warm-up: as it started; after it: what the load left behind).
 */
export async function measureIdle (request: LoadRequest, seconds: number): Promise<Measurement> {
  await new Promise(resolve => setTimeout(resolve, seconds * 1000))
  const latencies = new Latencies()
  const sentAt = performance.now()
  const response = await fetch(request.url, { method: request.method, headers: request.headers, body: request.body })
  await response.arrayBuffer()
  latencies.push(performance.now() - sentAt)
  const ok = response.status === 200 ? 1 : 0
  return summarize(latencies.values.subarray(0, latencies.count), {
    ok, errors: 0, timeouts: 0, non2xx: 1 - ok, statusCodes: { [response.status]: 1 }, durationSeconds: seconds, connections: 1
  })
}

export async function warmUp (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runLoad(request, { connections: settings.connections, durationSeconds: settings.warmupSeconds })
}
