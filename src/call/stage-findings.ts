import type { CallTrace } from '../shared/trace-contracts.ts'
import { DEFAULT_URGENCY } from '../shared/fair-queue.ts'
import type { AnswerTee } from '../shared/response-sink.ts'
import type { WebhookTarget } from '../webhook/webhook-endpoint.ts'
import type { WebhookTee } from '../webhook/webhook-tee.ts'
import type { RequestBody } from './request-body.ts'

/**
 * A sync call recorded as a run (it holds an Idempotency-Key): given the call's webhook tee (if
 * any), the tee that records what the caller gets on the run and feeds the webhook's.
 */
export type RunRecording = (webhook: WebhookTee | undefined) => AnswerTee

/**
 * What the `/v4` stages find of a call (call/stage-call.ts), as it is before any has run: the one
 * place these start values are written, for every kind of call (CallRecord's, the console's, a
 * test's).
 */
export abstract class StageFindings {
  /** Who calls, as an Idempotency-Key is scoped: the verified token's `sub` ('' with auth off, or for a token without one). */
  caller = ''
  /** Its `Priority` urgency (0 most urgent … 7; 3 by default): the order of its wait for a slot. */
  urgency = DEFAULT_URGENCY
  /** Who calls, as waits are shared fairly and CALLER_MAX_INFLIGHT counts: `caller`, else its address. */
  fairCaller = ''
  /** The app has the request: its relay answers from now on. */
  forwarded = false
  /** Its spans (tracing on): ended as it closes. */
  trace: CallTrace | undefined = undefined
  /** Where the call asked its webhook to go. */
  webhook: WebhookTarget | undefined = undefined
  /** A POST's Idempotency-Key. */
  idempotencyKey: string | undefined = undefined
  /** What goes to the app (read whole once the key stage has taken its digest). */
  body: RequestBody = null
  /** `?async=true` or `Prefer: respond-async`: queued as a run, answered 202. */
  async = false
  /** The Idempotency-Key slot this call holds in the run store: filled with its answer or freed as it ends. */
  keySlot: string | undefined = undefined
  /** A sync call recorded as a run with its key: makes the tee that records its answer on the run. */
  recording: RunRecording | undefined = undefined
  /** `Prefer: wait=<seconds>` of a sync call, and what aborts when it runs out (see bounded-wait.ts). */
  waitSeconds: number | undefined = undefined
  waitOver: AbortSignal | undefined = undefined
  /** Where it is known by its run id while in flight (a cancel finds it there); it leaves as it closes. */
  inFlight: { leave: () => void } | undefined = undefined
}
