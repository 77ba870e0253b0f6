import type { Logger } from 'pino'
import type { Pool } from 'undici'
import type { SidecarConfig } from '../config/sidecar-config.ts'
import type { ConcurrencyGate } from '../lifecycle/concurrency-gate.ts'
import type { InflightTracker } from '../lifecycle/inflight-tracker.ts'
import type { InternalErrorReporter } from '../shared/internal-errors.ts'
import type { Tracer } from '../shared/trace-contracts.ts'
import type { SidecarMetrics } from '../metrics/metrics.ts'
import type { WebhookSubmitter } from '../webhook/webhook-delivery.ts'
import type { CancelAtApp } from '../call/app-cancel.ts'
import type { CallsByRunId } from '../call/calls-by-run-id.ts'
import { AsyncRunner } from './runner/async-runner.ts'
import { openRunStore } from './store/open-run-store.ts'
import type { RunStore } from './store/run-store.ts'
import { DurableWebhooks } from './webhooks/durable-webhooks.ts'

/** What the runs feature needs of the sidecar it runs in. */
export interface RunsDeps {
  readonly gate: ConcurrencyGate
  readonly app: Pool
  /** The webhook sender: durable deliveries go to it once written down. */
  readonly sender: WebhookSubmitter
  readonly metrics: SidecarMetrics
  readonly logger: Logger
  /** Logs and counts an exception nobody expected (sidecar_internal_errors_total). */
  readonly reportInternal: InternalErrorReporter
  readonly inflight: InflightTracker
  readonly tracer: Tracer | undefined
  /** A run store to use instead of the one RUN_STORE_URL names (tests). */
  readonly store?: RunStore | undefined
  /** This replica's calls in flight: another replica's cancel finds them through the store. */
  readonly calls: CallsByRunId
  /** APP_CANCEL_PATH's POST (undefined: unset). */
  readonly cancelAtApp: CancelAtApp | undefined
}

/** The runs feature as the sidecar wires it in. */
export interface Runs {
  readonly store: RunStore
  /** Where every webhook goes: written down first with a shared store, then to the sender. */
  readonly webhooks: DurableWebhooks
  /** Takes queued async runs as the gate has slots; start it once the listeners are up. */
  readonly runner: AsyncRunner
}

/**
 * Opens the run store RUN_STORE_URL names and wires the async runner and durable webhook delivery
 * to it: cancels, lost runs and lost deliveries the store tells of, its availability logged.
 */
export async function openRuns (config: SidecarConfig, deps: RunsDeps): Promise<Runs> {
  const { metrics, logger } = deps
  const store = deps.store ?? await openRunStore(config.runStoreUrl, {
    retentionSeconds: config.runRetentionSeconds,
    maxEvents: config.runMaxEvents,
    maxEventBytes: config.runMaxEventBytes,
    queueDepth: config.asyncQueueDepth,
    queueMaxBytes: config.asyncQueueMaxBytes,
    queueTtlSeconds: config.asyncQueueTtlSeconds,
    maxAttempts: config.runMaxAttempts,
    scope: config.projectId !== undefined && config.appName !== undefined ? { projectId: config.projectId, appName: config.appName } : undefined
  }, { consumer: config.replicaName, lostAfterMs: config.runLostAfterSeconds * 1000 }, (fields, message) => { logger.warn(fields, message) })
  metrics.watchAsyncQueue(async () => await store.queue.queuedCount(), async () => await store.queue.runningCount(), () => store.available)
  metrics.watchQueuedByUrgency(async () => await store.queue.queuedByUrgency(), () => store.available)
  const webhooks = new DurableWebhooks(store, deps.sender, logger)
  const runner = new AsyncRunner({
    store,
    gate: deps.gate,
    app: deps.app,
    appUrl: config.appUrl.href,
    webhooks,
    webhookMaxBodyBytes: config.webhookMaxBodyBytes,
    maxResultBytes: config.envelopeMaxBodyBytes,
    maxEventBytes: config.streamMaxEventBytes,
    deadlineSeconds: config.deadlineSeconds,
    queueTtlSeconds: config.asyncQueueTtlSeconds,
    maxAttempts: config.runMaxAttempts,
    replicaConcurrency: config.replicaConcurrency,
    runsTotal: metrics.runsTotal,
    replica: config.replicaName,
    cancels: metrics.cancels,
    cancelAtApp: deps.cancelAtApp,
    logger,
    reportInternal: deps.reportInternal,
    inflight: deps.inflight,
    tracer: deps.tracer
  })
  store.listen({
    canceled: (scope, runId) => { runner.canceled(scope, runId) },
    cancelCall: (scope, runId, caller) => deps.calls.cancel(scope, runId, caller),
    lost: (run, view) => { runner.lost(run, view) },
    retried: (scope, runId, reason, attempt) => {
      metrics.runRetries.labels(reason).inc()
      logger.warn({ runId, projectId: scope.projectId, appName: scope.appName, attempt, reason }, 'async run interrupted: queued again for its next attempt')
    },
    expired: (run, view) => { runner.expired(run, view) },
    deliveryLost: held => { webhooks.resume(held) },
    truncated: (scope, runId, what) => { logger.warn({ runId, projectId: scope.projectId, appName: scope.appName, cut: what }, 'run kept in part') },
    rewritten: (scope, runId, what) => { logger.warn({ runId, projectId: scope.projectId, appName: scope.appName, rewritten: what }, 'run store lost a write in a failover; written again') },
    availability: (available, why) => {
      // once per outage (a store down at start included), and once when it is back
      const runStore = config.runStoreUrl?.text
      if (available) logger.info({ runStore }, `run store reachable at RUN_STORE_URL ${runStore ?? ''}`)
      else logger.warn({ runStore, reason: why }, `run store unreachable at RUN_STORE_URL ${runStore ?? ''}: ${why ?? 'not connected'}; async runs and run records answer 503 until it is back`)
      runner.availability(available)
    }
  })
  return { store, webhooks, runner }
}
