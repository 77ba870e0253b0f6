import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Duplex } from 'node:stream'
import type { Logger } from 'pino'
import { CallerGoneError, DeadlineExceededError, type SidecarError } from '../errors.ts'
import type { InflightTracker } from '../lifecycle/inflight-tracker.ts'
import type { RouteLabel, SidecarMetrics } from '../metrics/metrics.ts'
import type { CallRoute } from './match-route.ts'
import { runIdFor } from './run-id.ts'
import { type AccessLine, writeAccessLine } from '../shared/access-line.ts'
import { StageFindings } from './stage-findings.ts'

/** What every finished request leaves behind: one log line, its metrics, and its drain slot freed. */
export interface CallRecorder {
  readonly logger: Logger
  readonly metrics: SidecarMetrics
  readonly inflight: InflightTracker
}

/** Whoever acts on a call's abort once it holds the call (the app request's relay). */
export interface AbortTaker {
  abortFor: (reason: Error) => void
  /**
   * The caller left: true when the work goes on without it (a recorded run's app request), and
   * then calls the call's `outlived()` as it ends; false, and the call aborts.
   */
  outlivesCaller?: () => boolean
}

/**
 * One request from arrival to close: its run id, an abort (caller gone, deadline) that whoever
 * holds the call at that moment acts on, and what to free when it closes. On close it logs one
 * line (method, path without query, status, duration in ms, run id) and counts the request.
 */
export abstract class CallRecord extends StageFindings {
  readonly req: IncomingMessage
  readonly runId: string
  /** What the route stage found: set first by either /v4 pipeline (a /v2 read has none). */
  route!: CallRoute
  /** How long it waited for its slot, in ms (Server-Timing's `queue`): 0 when one was free. */
  queueMs = 0
  /** When it arrived (performance.now()): its deadlines count from here. */
  readonly arrivedAt: number
  /** The sidecar's own answer, when it gave one: its code and reason go in the log line. */
  protected refusal: SidecarError | undefined
  #controller: AbortController | undefined
  #reason: Error | undefined
  #onAbort: AbortTaker | undefined
  /** One cleanup, or several (most calls have one: the slot). */
  #onClose: (() => void) | Array<() => void> | undefined
  #freed = false
  /** Its caller left, and its app request goes on: what the call holds is freed as that ends. */
  #outliving = false
  readonly #metrics: SidecarMetrics
  readonly #inflight: InflightTracker

  constructor (recorder: CallRecorder, label: RouteLabel, req: IncomingMessage, closes: Duplex | ServerResponse) {
    super()
    this.req = req
    this.#metrics = recorder.metrics
    this.#inflight = recorder.inflight
    this.runId = runIdFor(req.headers['x-request-id'])
    const startedAt = this.arrivedAt = performance.now()
    const url = req.url as string // before a forward step rewrites it
    recorder.inflight.begin()
    closes.once('close', () => {
      if (!this.finished) {
        if (this.#onAbort?.outlivesCaller?.() === true) this.#outliving = true
        else this.abort(new CallerGoneError())
      }
      if (!this.#outliving) this.#free()
      const seconds = (performance.now() - startedAt) / 1000
      const status = this.status
      this.trace?.end(status, this.runId)
      recorder.metrics.recordRequest(label, status, seconds)
      if (!recorder.logger.isLevelEnabled('info')) return
      const queryAt = url.indexOf('?')
      const line: AccessLine = {
        method: req.method,
        path: queryAt === -1 ? url : url.slice(0, queryAt),
        status,
        duration: Math.round(seconds * 1e6) / 1e3,
        runId: this.runId
      }
      if (!this.finished && label !== 'websocket') line.aborted = true
      if (this.refusal !== undefined) {
        line.error = this.refusal.code
        line.reason = this.refusal.reason
      }
      writeAccessLine(recorder.logger, line, label === 'websocket' ? 'websocket' : 'request')
    })
  }

  /** The status to log and count (499: the caller left before any answer). */
  abstract get status (): number
  /** The answer went out whole. */
  abstract get finished (): boolean
  /** The caller can no longer be answered (it left, or an answer was sent). */
  abstract get settled (): boolean
  /** Answers with the sidecar's own JSON error; an unexpected exception is logged and answered 500. */
  abstract answer (error: unknown): void

  /** Aborts when the caller leaves or the deadline passes (for waits that take a signal). */
  get signal (): AbortSignal {
    this.#controller ??= new AbortController()
    if (this.#reason !== undefined && !this.#controller.signal.aborted) this.#controller.abort(this.#reason)
    return this.#controller.signal
  }

  /** Ends whatever the call is doing; the first reason wins. */
  abort (reason: Error): void {
    if (this.#reason !== undefined) return
    this.#reason = reason
    // a cancel through `_runs` is counted by its route, on the replica it reached
    if (reason instanceof CallerGoneError) this.#metrics.cancels.labels('caller').inc()
    else if (reason instanceof DeadlineExceededError) this.#metrics.cancels.labels('deadline').inc()
    this.#controller?.abort(reason)
    this.#onAbort?.abortFor(reason)
  }

  /** The one party that acts on an abort from now on (the app request's relay). */
  onAbort (taker: AbortTaker): void {
    this.#onAbort = taker
    if (this.#reason !== undefined) taker.abortFor(this.#reason)
  }

  /** It got its slot after waiting `ms` (0: at once). */
  waited (ms: number): void {
    this.queueMs = ms
    this.#metrics.queueDuration.observe(ms / 1000)
    if (this.trace !== undefined) {
      const now = performance.timeOrigin + performance.now()
      this.trace.queued(now - ms, now)
    }
  }

  /** Its caller left, and its app request goes on without it (a recorded run): it is answered all the same. */
  get outliving (): boolean { return this.#outliving }

  /** Its caller is answered already (202: its `Prefer: wait` ran out) and its app request goes on: what the call holds is freed as that ends (outlived). */
  outlive (): void {
    if (!this.#freed) this.#outliving = true
  }

  /** The app request that outlived its caller has ended: what the call held is freed now. */
  outlived (): void {
    if (!this.#outliving) return
    this.#outliving = false
    this.#free()
  }

  /**
   * Runs `free` when the call closes (finished or cut), or at once when it already has; for a
   * call that outlives its caller, when its app request ends.
   */
  onClose (free: () => void): void {
    const cleanups = this.#onClose
    if (this.#freed) free()
    else if (cleanups === undefined) this.#onClose = free
    else if (typeof cleanups === 'function') this.#onClose = [cleanups, free]
    else cleanups.push(free)
  }

  /** What a kind of call frees of its own as it closes (after its cleanups, before the drain count). */
  protected freed (): void {}

  #free (): void {
    this.#freed = true
    const cleanups = this.#onClose
    if (typeof cleanups === 'function') cleanups()
    else if (cleanups !== undefined) for (const free of cleanups) free()
    this.freed()
    this.#inflight.end()
  }
}
