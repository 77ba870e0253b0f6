import type { Logger } from 'pino'
import type { Pool } from 'undici'
import type { ConcurrencyGate } from '../../lifecycle/concurrency-gate.ts'
import type { InflightTracker } from '../../lifecycle/inflight-tracker.ts'
import type { RunStore } from '../store/run-store.ts'
import type { HeldDelivery, RunStatus } from '../run-data.ts'
import type { InternalErrorReporter } from '../../shared/internal-errors.ts'
import type { CancelCause, LabelledCounter } from '../../shared/metric-contracts.ts'
import type { Tracer } from '../../shared/trace-contracts.ts'
import type { WebhookJob, WebhookSubmitter } from '../../webhook/webhook-delivery.ts'
import type { CancelAtApp } from '../../call/app-cancel.ts'

/** What the async runner works with: the run store, the gate, the app, and what it reports to. */
export interface AsyncRunnerDeps {
  readonly store: RunStore
  readonly gate: ConcurrencyGate
  readonly app: Pool
  /** APP_URL, as a failure's log reason names it. */
  readonly appUrl: string
  readonly webhooks: RunWebhooks
  readonly webhookMaxBodyBytes: number
  /** ENVELOPE_MAX_BODY_BYTES: the largest body kept as a result. */
  readonly maxResultBytes: number
  /** STREAM_MAX_EVENT_BYTES: the longest event of a streamed answer. */
  readonly maxEventBytes: number
  readonly deadlineSeconds: number
  /** ASYNC_QUEUE_TTL_SECONDS: a run taken after it would have expired in the queue does not go to the app. */
  readonly queueTtlSeconds: number
  /** RUN_MAX_ATTEMPTS: a run whose attempt was interrupted goes back to the queue while it has attempts left (a shared store). */
  readonly maxAttempts: number
  /** REPLICA_CONCURRENCY (0: no limit, and then at most UNLIMITED_PARALLEL async runs at once). */
  readonly replicaConcurrency: number
  readonly runsTotal: LabelledCounter<RunStatus>
  /** This replica's name in run-end lines (thisReplica: HOSTNAME, else the machine's). */
  readonly replica?: string
  /** sidecar_cancels_total: a run's deadline counts here (a cancel, on the route that took it). */
  readonly cancels: LabelledCounter<CancelCause>
  /** APP_CANCEL_PATH's POST, for a run whose app request the sidecar cut; undefined: unset. */
  readonly cancelAtApp?: CancelAtApp | undefined
  readonly logger: Logger
  /** An exception nobody expected while a run ran: reported once; the run fails, 500. */
  readonly reportInternal: InternalErrorReporter
  readonly inflight: InflightTracker
  /** Makes the app request's client span, under the submitter's trace (tracing on). */
  readonly tracer?: Tracer | undefined
}

/** Where the runner's webhooks go (DurableWebhooks). */
export interface RunWebhooks extends WebhookSubmitter {
  /** A delivery already written down and held (with its run's end): its attempts. */
  submitHeld: (job: WebhookJob, held: HeldDelivery) => void
}
