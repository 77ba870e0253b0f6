import type { IncomingMessage } from 'node:http'
import type { AnswerWriter } from '../shared/answer-writer.ts'
import type { CallTrace } from '../shared/trace-contracts.ts'
import type { WebhookTarget } from '../webhook/webhook-endpoint.ts'
import type { AbortTaker } from './call-record.ts'
import type { CallRoute } from './match-route.ts'
import type { RunRecording } from './stage-findings.ts'
import type { RequestBody } from './request-body.ts'

export type { RunRecording } from './stage-findings.ts'

/**
 * What a `/v4` stage reads and writes of a call: the request, where its answer goes, what the
 * stages before it found, and the call's lifetime hooks. `HttpCall` is the one the pipeline makes;
 * `test/helpers/fake-call.ts` makes one with no sidecar around it, to test a stage alone.
 *
 * A stage stops a call one way (docs/architecture.md, "The request path"): a refusal is thrown as
 * the SidecarError it answers with, which the pipeline answers; a stage that answered the call
 * itself (a record, a 202, a replay) returns true. Any other return lets the next stage run.
 */
export interface StageCall {
  readonly req: IncomingMessage
  /** Where its answer is written, whoever writes it (answer-writer.ts): never to the response itself. */
  readonly out: AnswerWriter
  readonly runId: string
  /** When it arrived (performance.now()): its deadlines count from here. */
  readonly arrivedAt: number
  // what the stages found, in the order they run (invoke-pipeline.ts)
  route: CallRoute
  /** Who calls, as an Idempotency-Key is scoped: the verified token's `sub` ('' with auth off). */
  caller: string
  /** Its `Priority` urgency (0 most urgent … 7). */
  urgency: number
  /** Who calls, as waits are shared fairly and CALLER_MAX_INFLIGHT counts. */
  fairCaller: string
  /** Where the call asked its webhook to go. */
  webhook: WebhookTarget | undefined
  /** A POST's Idempotency-Key. */
  idempotencyKey: string | undefined
  /** What goes to the app (read whole once the key stage has taken its digest). */
  body: RequestBody
  /** `?async=true` or `Prefer: respond-async`: queued as a run, answered 202. */
  async: boolean
  /** The Idempotency-Key slot this call holds in the run store: filled with its answer or freed as it ends. */
  keySlot: string | undefined
  /** A sync call recorded as a run with its key: makes the tee that records its answer on the run. */
  recording: RunRecording | undefined
  /** `Prefer: wait=<seconds>` of a sync call, and what aborts when it runs out (bounded-wait.ts). */
  waitSeconds: number | undefined
  waitOver: AbortSignal | undefined
  /** The app has the request: its relay answers from now on. */
  forwarded: boolean
  /** Its spans (tracing on). */
  trace: CallTrace | undefined
  /** Where it is known by its run id while in flight (calls-by-run-id.ts); it leaves as it closes. */
  inFlight: { leave: () => void } | undefined
  /** The caller can no longer be answered (it left, or an answer was sent). */
  readonly settled: boolean
  /** Its caller left, and its app request goes on without it (a recorded run). */
  readonly outliving: boolean
  /** Aborts when the caller leaves or the deadline passes (for waits that take a signal). */
  readonly signal: AbortSignal
  /** Answers with the sidecar's own JSON error; an unexpected exception is answered 500. */
  answer: (error: unknown) => void
  /** Ends whatever the call is doing; the first reason wins. */
  abort: (reason: Error) => void
  /** The one party that acts on an abort from now on (the app request's relay). */
  onAbort: (taker: AbortTaker) => void
  /** Runs `free` when the call closes, or at once when it already has. */
  onClose: (free: () => void) => void
  /** Its caller is answered already and its app request goes on: what it holds is freed as that ends. */
  outlive: () => void
  /** It got its slot after waiting `ms` (0: at once). */
  waited: (ms: number) => void
}
