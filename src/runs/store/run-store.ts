// The run store's contract: what the sidecar asks of it, whichever backend holds the runs
// (memory: this sidecar only; Redis: every sidecar given the same RUN_STORE_URL).

import type { HeldDelivery, InterruptionReason, RunScope, RunView, TakenRun } from '../run-data.ts'
import type { DurableDeliveries } from './durable-deliveries.ts'
import type { KeyClaims } from './key-claims.ts'
import type { RunListing } from './run-listing.ts'
import type { RunQueue } from './run-queue.ts'
import type { RunRecords } from './run-records.ts'

/** What the store needs to know besides where it lives. */
export interface RunStoreSettings {
  /** RUN_RETENTION_SECONDS: how long a finished run's record, result and events stay readable. */
  readonly retentionSeconds: number
  /** RUN_MAX_EVENTS: most events kept per run; the oldest go first. */
  readonly maxEvents: number
  /** RUN_MAX_EVENT_BYTES: most bytes of events kept per run (with maxEvents); the oldest go first, the newest always stays. */
  readonly maxEventBytes: number
  /** ASYNC_QUEUE_DEPTH: most async runs waiting per app. */
  readonly queueDepth: number
  /** ASYNC_QUEUE_MAX_BYTES: most request-body bytes of async runs waiting per app (counted from submission until the run starts or is canceled). */
  readonly queueMaxBytes: number
  /** ASYNC_QUEUE_TTL_SECONDS: a run still queued this long after its submission fails (default one day). */
  readonly queueTtlSeconds?: number
  /**
   * RUN_MAX_ATTEMPTS: attempts an async run may have (default 1). Above 1 its attempts are counted
   * (the record's `attempt`), and a shared store puts a run whose attempt was interrupted back in
   * the queue while it has attempts left.
   */
  readonly maxAttempts?: number
  /** The one app this sidecar serves (PROJECT_ID and APP_NAME); a shared store needs it, memory takes every app's runs without it. */
  readonly scope: RunScope | undefined
}

/** Told of runs the sidecar must act on although it did not start them. */
export interface RunStoreListener {
  /** A run this sidecar runs was canceled (by a cancel on any sidecar): abort its app request. */
  canceled: (scope: RunScope, runId: string) => void
  /** Another sidecar asks for this one's in-flight call with that run id (`caller` given: that caller's) to be canceled: true when this one held it. */
  cancelCall?: (scope: RunScope, runId: string, caller?: string) => boolean
  /** A run whose sidecar was lost was failed ("replica lost") by this one: send its webhook. */
  lost: (run: TakenRun, view: RunView) => void
  /** A run whose attempt was interrupted was put back in the queue by this sidecar, for its next attempt (sidecar_run_retries_total). */
  retried?: (scope: RunScope, runId: string, reason: InterruptionReason, attempt: number) => void
  /** A queued run was failed by a time limit (`Cancel-After`, ASYNC_QUEUE_TTL_SECONDS) by this sidecar: send its webhook (`view.delivery`: held already). */
  expired: (run: TakenRun, view: RunView) => void
  /** The backend became reachable (true) or unreachable (false: `why`, in plain words); also as first known at start. */
  availability: (available: boolean, why?: string) => void
  /** A delivery whose sidecar was lost (or stopped) is now this one's: make its remaining attempts. */
  deliveryLost?: (delivery: HeldDelivery) => void
  /** Part of a run could not be kept (`what`: which part, and why): logged, the record keeps its shape. */
  truncated?: (scope: RunScope, runId: string, what: string) => void
  /** A write the backend acknowledged then lost (a failover before its replica had it) was made again (`what`: which). */
  rewritten?: (scope: RunScope, runId: string, what: string) => void
}

/**
 * Where recorded runs live: the backend's parts by role. Every method that reaches the backend
 * rejects with RunStoreUnavailableError while it cannot be reached; the ones naming a run reject
 * with RunNotFoundError when the scope holds no such run.
 */
export interface RunStore {
  /** Which backend holds the runs (the start-up log line names it). */
  readonly backend: 'memory' | 'redis'
  /** False while the backend cannot be reached. */
  readonly available: boolean
  /** The async runs waiting to run, and the taking of them. */
  readonly queue: RunQueue
  /** The runs' records, events and results. */
  readonly records: RunRecords
  /** Idempotency-Key slots. */
  readonly keys: KeyClaims
  /** An app's runs as a whole: listed, its queued ones canceled. */
  readonly listing: RunListing
  /** Durable webhook delivery: only a shared store writes deliveries down; undefined in memory, where nothing changes. */
  readonly deliveries: DurableDeliveries | undefined
  /**
   * Asks every other sidecar sharing the store to cancel its in-flight call with that run id (a
   * plain call, a recorded sync call; `caller` given: only one whose caller, the token's `sub`, it
   * is): true when one held it and canceled it. Memory: false (no other).
   */
  cancelCall: (scope: RunScope, runId: string, caller?: string) => Promise<boolean>
  /** Where the store tells the sidecar of cancels, lost runs and its availability. */
  listen: (listener: RunStoreListener) => void
  /** Stops background work and closes connections; pending take() calls reject. */
  close: () => Promise<void>
}
