import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { AnswerWriter } from '../shared/answer-writer.ts'
import { knownError, sendError } from '../shared/http-answers.ts'
import { SIDECAR_INTERNAL } from '../errors.ts'
import type { WebhookTarget } from '../webhook/webhook-endpoint.ts'
import { type CallRecorder, CallRecord } from './call-record.ts'
import type { RequestBody } from './request-body.ts'
import type { RunRecording, StageCall } from './stage-call.ts'
import type { RouteLabel } from '../metrics/metrics.ts'

/** An HTTP request and its response. */
export class HttpCall extends CallRecord implements StageCall {
  readonly res: ServerResponse
  /** Everything the call's caller gets is written here (answer-writer.ts). */
  readonly out: AnswerWriter
  // what the /v4 stages found, in the order they run (invoke-pipeline.ts)
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
  readonly #logger: Logger

  constructor (recorder: CallRecorder, route: RouteLabel, req: IncomingMessage, res: ServerResponse) {
    super(recorder, route, req, res)
    this.res = res
    this.out = new AnswerWriter(req, res)
    this.#logger = recorder.logger
  }

  get status (): number { return this.res.headersSent ? this.res.statusCode : 499 }
  get finished (): boolean { return this.res.writableFinished }
  // a call that outlives its caller is still answered, for its Idempotency-Key (nothing reaches the socket)
  get settled (): boolean { return this.out.writableEnded || (this.res.destroyed && !this.outliving) }

  protected override freed (): void { this.inFlight?.leave() }

  answer (error: unknown): void {
    if (this.settled) return
    const ctx = { runId: this.runId, logger: this.#logger, internal: SIDECAR_INTERNAL }
    this.refusal = knownError(error, ctx)
    sendError(this.out, this.refusal, ctx)
  }
}
