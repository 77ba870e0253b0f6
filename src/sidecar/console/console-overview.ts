import type { SidecarMetrics } from '../../metrics/metrics.ts'
import type { RunScope } from '../../runs/run-data.ts'
import { readinessOf, type ReadinessDeps } from '../admin-server.ts'
import { readMetric, readSum } from './console-readings.ts'

/** What the console's tiles read besides the metrics. */
export interface OverviewDeps extends ReadinessDeps {
  readonly scope: RunScope
  readonly metrics: SidecarMetrics
  /** REPLICA_CONCURRENCY (0: no limit). */
  readonly replicaConcurrency: number
  /** The callers holding the most slots at this replica, most first. */
  readonly busiestCallers: (count: number) => ReadonlyArray<{ caller: string, inflight: number }>
  /** The run store's backend (memory, redis). */
  readonly runStoreBackend: string
  /** Webhook deliveries in progress or waiting to retry at this replica. */
  readonly webhooksPending: () => number
}

/** The tiles of the console (docs/console.md, "What it shows"), as `GET /console/api/overview` answers them. */
export interface Overview {
  readonly app: { readonly project_id: string, readonly app_name: string }
  readonly ready: boolean
  /** Why not ready (as /readyz says it), absent when ready. */
  readonly not_ready?: string
  readonly slots: { readonly in_use: number, readonly limit: number }
  readonly waiting: number
  /** Async runs waiting, by urgency 0 (most urgent) to 7, and their sum. */
  readonly backlog: { readonly by_urgency: readonly number[], readonly total: number }
  readonly busiest_callers: ReadonlyArray<{ caller: string, inflight: number }>
  /** Async runs in progress on any replica sharing the run store. */
  readonly running: number
  readonly run_store: { readonly backend: string, readonly up: boolean }
  readonly webhooks: { readonly pending: number, readonly failed: number }
}

const URGENCIES = 8
const BUSIEST = 5

/** Reads the tiles now, from the metrics as a scrape would (the run store's gauges: their last reading when it is slow). */
export async function readOverview (deps: OverviewDeps): Promise<Overview> {
  const registry = deps.metrics.registry
  const [inUse, waiting, byUrgencySamples, running, storeUp, failed] = await Promise.all([
    readSum(registry, 'sidecar_inflight_requests'),
    readSum(registry, 'sidecar_queued_requests'),
    readMetric(registry, 'sidecar_async_queued_runs_by_urgency'),
    readSum(registry, 'sidecar_async_running_runs'),
    readSum(registry, 'sidecar_run_store_up'),
    readSum(registry, 'sidecar_webhook_deliveries_total', { result: 'failed' })
  ])
  const byUrgency = new Array<number>(URGENCIES).fill(0)
  for (const { labels, value } of byUrgencySamples) {
    const urgency = Number(labels.urgency)
    if (urgency >= 0 && urgency < URGENCIES) byUrgency[urgency] = value
  }
  const readiness = readinessOf(deps)
  return {
    app: { project_id: deps.scope.projectId, app_name: deps.scope.appName },
    ready: readiness.status === 200,
    ...(readiness.body.message === undefined ? {} : { not_ready: readiness.body.message }),
    slots: { in_use: inUse, limit: deps.replicaConcurrency },
    waiting,
    backlog: { by_urgency: byUrgency, total: byUrgency.reduce((sum, n) => sum + n, 0) },
    busiest_callers: deps.busiestCallers(BUSIEST),
    running,
    run_store: { backend: deps.runStoreBackend, up: storeUp === 1 },
    webhooks: { pending: deps.webhooksPending(), failed }
  }
}
