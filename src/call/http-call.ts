import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { AnswerWriter } from '../shared/answer-writer.ts'
import { knownError, sendError } from '../shared/http-answers.ts'
import { SIDECAR_INTERNAL } from '../errors.ts'
import { type CallRecorder, CallRecord } from './call-record.ts'
import type { StageCall } from './stage-call.ts'
import type { RouteLabel } from '../metrics/metrics.ts'

/** An HTTP request and its response. */
export class HttpCall extends CallRecord implements StageCall {
  readonly res: ServerResponse
  /** Everything the call's caller gets is written here (answer-writer.ts). */
  readonly out: AnswerWriter
  // what the /v4 stages find (webhook, key, body, …) starts as StageFindings has it
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
