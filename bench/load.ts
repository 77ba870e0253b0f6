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
  /** Peak RSS of the target's own processes during the phase, MB = 10⁶ bytes (Linux; their sum; undefined without a process of its own), by run.ts. */
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

const is2xx = (status: number): boolean => status >= 200 && status < 300

/**
 * Runs autocannon against `request`. The percentiles come from autocannon's per-response hrtime
 * durations (2xx only), not its histogram, which has 1 ms resolution and adds coordinated-omission
 * samples at a fixed rate: sub-millisecond differences between targets are the point of this bench.
 */
export async function runLoad (request: LoadRequest, options: LoadOptions): Promise<Measurement> {
  const latencies = new Latencies()
  const ids = options.requestIds
  let next = 0
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    autocannon({
      url: request.url,
      method: request.method,
      headers: request.headers,
      ...(request.body === undefined ? {} : { body: request.body }),
      connections: options.connections,
      pipelining: 1,
      duration: options.durationSeconds,
      timeout: 10,
      ...(options.overallRate === undefined ? {} : { overallRate: options.overallRate }),
      ...(ids === undefined
        ? {}
        : {
            requests: [{
              setupRequest: req => {
                const id = `${ids.prefix}${next++}`
                req.headers = { ...req.headers, [ids.header ?? 'x-request-id']: id }
                ids.onIssued?.(id)
                return req
              },
              onResponse: (status, _body, _context, headers) => {
                if (!is2xx(status) || ids.onAnswered === undefined) return
                const id = Object.entries(headers ?? {}).find(([name]) => name.length === 12 && name.toLowerCase() === 'x-request-id')?.[1]
                if (typeof id === 'string') ids.onAnswered(id)
              }
            }]
          })
    }, (error, result) => { if (error === null || error === undefined) resolve(result); else reject(error as Error) })
      .on('response', (_client, status, _bytes, responseTime) => { if (is2xx(status)) latencies.push(responseTime) })
  })
  const statusCodes = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([code, stat]) => [code, stat.count ?? 0]))
  return summarize(latencies, {
    ok: result['2xx'], errors: result.errors, timeouts: result.timeouts, non2xx: result.non2xx, statusCodes, durationSeconds: result.duration,
    connections: options.connections, ...(options.overallRate === undefined ? {} : { targetRate: options.overallRate })
  })
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

/** A Measurement from 2xx latencies (ms, any order; sorted in place) and the counts; percentiles by nearest rank (exact). */
export function summarize (latencies: Float64Array | Latencies, counts: LoadCounts): Measurement {
  const sorted = (latencies instanceof Latencies ? latencies.values.subarray(0, latencies.count) : latencies).sort()
  const n = sorted.length
  const at = (p: number): number => n === 0 ? NaN : sorted[Math.min(n, Math.max(1, Math.ceil(p / 100 * n))) - 1] as number
  return {
    rps: counts.durationSeconds > 0 ? counts.ok / counts.durationSeconds : 0,
    p50Ms: at(50), p90Ms: at(90), p99Ms: at(99), maxMs: at(100),
    meanMs: n === 0 ? NaN : sorted.reduce((total, v) => total + v, 0) / n,
    ...counts,
    valid: counts.ok > 0 && counts.errors === 0 && counts.timeouts === 0 && counts.non2xx === 0
  }
}

/** Calls `send` with the ms elapsed (at most `seconds`) every ~1 ms tick until `seconds` have passed: the clock of the open-loop generators. */
export async function eachTick (seconds: number, send: (elapsedMs: number) => void): Promise<void> {
  const start = performance.now()
  await new Promise<void>(resolve => {
    const tick = (): void => {
      const elapsed = performance.now() - start
      send(Math.min(elapsed, seconds * 1000))
      if (elapsed >= seconds * 1000) { clearInterval(timer); resolve() }
    }
    const timer = setInterval(tick, 1)
    tick()
  })
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
 * A fixed overall rate (autocannon `overallRate`). Autocannon gives each connection rate/connections
 * requests a second, spent back to back: the load comes in bursts of up to `rateConnections` requests.
 */
export async function measureFixedRate (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runLoad(request, { connections: settings.rateConnections, durationSeconds: settings.durationSeconds, overallRate: settings.rate })
}

/** At rest for `seconds`, then one request: the phase's peak RSS is the target's idle figure. */
export async function measureIdle (request: LoadRequest, seconds: number): Promise<Measurement> {
  await new Promise(resolve => setTimeout(resolve, seconds * 1000))
  const sentAt = performance.now()
  const response = await fetch(request.url, { method: request.method, headers: request.headers, body: request.body })
  await response.arrayBuffer()
  const ok = response.status === 200 ? 1 : 0
  return summarize(Float64Array.of(performance.now() - sentAt), {
    ok, errors: 0, timeouts: 0, non2xx: 1 - ok, statusCodes: { [response.status]: 1 }, durationSeconds: seconds, connections: 1
  })
}

/** Warm-up load (results discarded): token caches, keep-alive pools, JIT. */
export async function warmUp (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runLoad(request, { connections: settings.connections, durationSeconds: settings.warmupSeconds })
}
