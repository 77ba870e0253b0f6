import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { InflightTracker } from '../lifecycle/inflight-tracker.ts'
import type { RouteLabel, SidecarMetrics } from './metrics.ts'

/** What every finished request leaves behind: one log line, its metrics, and its drain slot freed. */
export interface CallRecorder {
  readonly logger: Logger
  readonly metrics: SidecarMetrics
  readonly inflight: InflightTracker
}

/**
 * Starts accounting for one request; when the response closes (finished or cut) it runs
 * `cleanup` (the call's own, so one listener serves both), logs one line (method, path without
 * query, status, duration in ms, run id) and counts it.
 */
export function recordCall (recorder: CallRecorder, route: RouteLabel, req: IncomingMessage, res: ServerResponse, runId: string,
  cleanup?: () => void): void {
  const startedAt = performance.now()
  recorder.inflight.begin()
  res.once('close', () => {
    cleanup?.()
    recorder.inflight.end()
    const seconds = (performance.now() - startedAt) / 1000
    const status = res.writableFinished ? res.statusCode : (res.headersSent ? res.statusCode : 499)
    recorder.metrics.recordRequest(route, status, seconds)
    const url = req.url ?? ''
    const queryAt = url.indexOf('?')
    recorder.logger.info({
      method: req.method,
      path: queryAt === -1 ? url : url.slice(0, queryAt),
      status,
      duration: Math.round(seconds * 1e6) / 1e3,
      runId,
      ...(res.writableFinished ? undefined : { aborted: true })
    }, 'request')
  })
}
