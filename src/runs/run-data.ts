// The runs' data: what a run is (its scope, record, request, outcome and events), what an
// Idempotency-Key's slot holds, and a durable webhook delivery, whichever store keeps them.

import type { InterruptionReason } from '../shared/metric-contracts.ts'
import type { TraceContext } from '../shared/trace-contracts.ts'
import type { WebhookTarget } from '../webhook/webhook-endpoint.ts'

/** Which app a run belongs to: every key is namespaced by it, and a run is only found in its own scope. */
export interface RunScope {
  readonly projectId: string
  readonly appName: string
}

export type RunStatus = 'queued' | 'running' | 'succeeded' | 'failed' | 'canceled'
export type WebhookStatus = 'pending' | 'delivered' | 'failed'
export type { InterruptionReason }

/** An attempt of a run that was interrupted (docs/runs.md, "Running on interruptible capacity"). */
export interface Interruption {
  readonly attempt: number
  readonly reason: InterruptionReason
  /** ISO 8601 UTC. */
  readonly at: string
}

/**
 * The run record of docs/runs.md, "The record", without its `result` (kept as JSON text beside
 * it, see RunView): a field that does not apply yet is absent. Times are ISO 8601 UTC.
 */
export interface RunRecord {
  run_id: string
  status: RunStatus
  created_at: string
  started_at?: string
  completed_at?: string
  queue_time_ms?: number
  run_time_ms?: number
  status_code?: number
  error?: { message: string }
  /** The current or last attempt, from 1 (RUN_MAX_ATTEMPTS above 1, once the run started). */
  attempt?: number
  /** Every interrupted attempt, once one was. */
  interruptions?: Interruption[]
  webhook?: { status: WebhookStatus, attempts: number }
}

/** A record as the store holds it: the record, its result as JSON text, and whether the run is async. */
export interface RunView {
  readonly record: RunRecord
  /** `result`, as JSON text (present once the run has ended with one). */
  readonly resultJson: string | undefined
  /** An async run (only those can be canceled). */
  readonly async: boolean
  /**
   * Set by `finish` when another sidecar ended the run first (it took this one for lost): that
   * end stands, and this sidecar sends no webhook for it (the other did).
   */
  readonly endedElsewhere?: true
  /** Set on a run another sidecar failed for lost: the lost sidecar's name (the replica that ran it). */
  readonly ranBy?: string
  /** Set by `finish` when its webhook's delivery was written down with the end (a shared store): it is held, ready to send. */
  readonly delivery?: HeldDelivery
  /** Set by `get`: the `sub` that submitted the run (RUN_ACCESS); undefined: not known (recorded by an older version). */
  readonly sub?: string | undefined
}

/** A request kept to run later exactly as the sync call would have run. */
export interface StoredRequest {
  readonly method: string
  /** Path and query as sent to the app (APP_URL's base path included, `async=true` and `webhookEndpoint` removed). */
  readonly path: string
  /** The headers as they are forwarded to the app: a flat [name, value, …] list. */
  readonly headers: readonly string[]
  readonly body: Buffer | null
}

/** An async run as it is submitted. */
export interface NewRun {
  readonly scope: RunScope
  readonly runId: string
  readonly request: StoredRequest
  /** Where its webhook goes; the secret is kept only until the delivery ends, never in a record. */
  readonly webhook: WebhookTarget | undefined
  /** When it was submitted (epoch ms): `created_at`, and the start of `queue_time_ms`. */
  readonly createdAt: number
  /** Its `Priority` urgency (0–7; undefined: not known, as a shared store's queue may not keep it). */
  readonly urgency?: number
  /** Who submitted it, as waits are shared fairly and CALLER_MAX_INFLIGHT counts (undefined: not known). */
  readonly caller?: string
  /** The `sub` of the token that submitted it ('' with auth off, undefined taken as ''): under RUN_ACCESS=caller, the one who may read, list and cancel it. */
  readonly sub?: string
}

/** A queued run this sidecar took from the queue: no other sidecar takes it unless this one is lost. */
export interface TakenRun extends NewRun {
  /** The backend's handle on the queue entry (Redis: the stream entry id; memory: ''). */
  readonly entry: string
  /** A sync call recorded with its key (keys.claim): the record as written then, which finish expects to find. */
  readonly running?: RunRecord
  /** `running` as JSON (written with the claim, compared at the end). */
  readonly runningJson?: string
  /** This attempt, from 1 (RUN_MAX_ATTEMPTS above 1: the app gets it as X-Run-Attempt); undefined: attempts are not counted. */
  readonly attempt?: number
  /** The number of this attempt's first event: the events of the attempts before it, and their retry events, come first (undefined: 0). */
  readonly firstEvent?: number
  /**
   * Taken without its request and webhook (a shared store: the queue entry names the run and its
   * record, the rest is read with the start); `request` is UNREAD_REQUEST until then: only the run
   * start() returns goes to the app.
   */
  readonly unread?: true
}

/** The request of a run taken `unread`: nothing to send (start() returns the run with its own). */
export const UNREAD_REQUEST: StoredRequest = Object.freeze({ method: '', path: '', headers: Object.freeze([]), body: null })

/** How a started run ended, as its owner saw it. */
export interface RunOutcome {
  readonly status: 'succeeded' | 'failed' | 'canceled'
  /** The app's status, or the sidecar's (502 unreachable, 503 replica stopped, 504 deadline, 499 canceled). */
  readonly statusCode: number
  /** `result`, as JSON text. */
  readonly resultJson: string
  readonly runTimeMs: number
  /** `error.message`, for failed and canceled runs. */
  readonly error: string | undefined
  /** Epoch ms. */
  readonly completedAt: number
  /** A recorded sync call: when its request went to the app (epoch ms), its `started_at` (it was recorded as its key was claimed). */
  readonly startedAt?: number
  /** The attempt was interrupted (its replica stopped, its app unreachable before it answered): an async run with attempts left runs again. */
  readonly interrupted?: InterruptionReason
}

/** One item of a run's event stream, as a reader of `…/_runs/{id}/events` gets them. */
export type RunEventItem =
  /** `event`: its SSE event name (`retry`: the attempt before was interrupted, the next one follows); undefined: a data event. */
  | { readonly type: 'event', readonly n: number, readonly data: string, readonly event?: 'retry' }
  /** The events before `first` (and after the reader's start) are no longer kept (RUN_MAX_EVENTS, RUN_MAX_EVENT_BYTES). */
  | { readonly type: 'gap', readonly first: number }
  /** The run has ended: the last item. */
  | { readonly type: 'done', readonly view: RunView }

/** The first request with an Idempotency-Key, as it claims the key's slot. */
export interface KeyClaim {
  /** The first request's run id: a repeat is answered with it. */
  readonly runId: string
  /** requestDigest of the first request's query and body: a repeat with another one is refused (422). */
  readonly digest: string
  readonly async: boolean
}

/** The answer a key's first request got, kept to answer its repeats. */
export interface KeptAnswer {
  readonly status: number
  readonly contentType: string | undefined
  /** The body as the caller got it (a stream: its SSE frames). */
  readonly body: Buffer
}

/** An answer to keep in a key's slot. */
export interface KeyAnswer {
  readonly slot: string
  readonly answer: KeptAnswer
}

/** What a key's slot holds: the first request's claim, and its answer once it has one. */
export interface KeyEntry extends KeyClaim {
  /** Undefined while the first request runs. */
  readonly answer: KeptAnswer | undefined
}

/** A webhook delivery as it is written down before its first attempt (durable delivery). */
export interface NewDelivery {
  readonly scope: RunScope
  readonly runId: string
  /** Where it goes; its secret is kept only until the delivery ends. */
  readonly target: WebhookTarget
  /** The JSON body every attempt sends. */
  readonly body: string
  /** The trace its attempts continue (the call's or the run's), so a sidecar that takes it over continues it too. */
  readonly trace?: TraceContext | undefined
}

/** A delivery held by this sidecar in a shared store: if it dies, another makes the remaining attempts. */
export interface HeldDelivery extends NewDelivery {
  /** Attempts already made, by any sidecar (a fresh one: 0; its first attempt is counted as it is held). */
  readonly attempts: number
  /** The backend's handle (Redis: the entry id in the app's deliveries stream and the delivery's id). */
  readonly entry: string
}
