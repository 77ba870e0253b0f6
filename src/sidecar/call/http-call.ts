import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { knownError, sendError } from '../../shared/http-answers.ts'
import { SIDECAR_INTERNAL } from '../../errors.ts'
import { type CallRecorder, CallRecord } from './call-record.ts'
import type { RouteLabel } from '../metrics/metrics.ts'

/** An HTTP request and its response. */
export class HttpCall extends CallRecord {
  readonly res: ServerResponse
  readonly #logger: Logger

  constructor (recorder: CallRecorder, route: RouteLabel, req: IncomingMessage, res: ServerResponse) {
    super(recorder, route, req, res)
    this.res = res
    this.#logger = recorder.logger
  }

  get status (): number { return this.res.headersSent ? this.res.statusCode : 499 }
  get finished (): boolean { return this.res.writableFinished }
  get settled (): boolean { return this.res.writableEnded || this.res.destroyed }

  answer (error: unknown): void {
    if (this.settled) return
    const ctx = { runId: this.runId, logger: this.#logger, internal: SIDECAR_INTERNAL }
    this.refusal = knownError(error, ctx)
    sendError(this.res, this.refusal, ctx)
  }
}
