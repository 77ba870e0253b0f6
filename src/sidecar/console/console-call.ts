import { randomUUID } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import { CallerGoneError, SIDECAR_INTERNAL } from '../../errors.ts'
import type { AbortTaker } from '../../call/call-record.ts'
import type { CallRoute } from '../../call/match-route.ts'
import type { StageCall } from '../../call/stage-call.ts'
import { StageFindings } from '../../call/stage-findings.ts'
import type { RunScope } from '../../runs/run-data.ts'
import { AnswerWriter } from '../../shared/answer-writer.ts'
import { knownError, sendError } from '../../shared/http-answers.ts'

/**
 * A console request handed to the `_runs` routes (the record, events, cancel, list), so the
 * console answers exactly as they do: not a `/v4` call (no gate, no webhook, no log line, not
 * counted in sidecar_requests_total nor held by the drain), it only ends when its reader leaves.
 */
export class ConsoleCall extends StageFindings implements StageCall {
  readonly req: IncomingMessage
  readonly out: AnswerWriter
  readonly runId = randomUUID()
  readonly arrivedAt = performance.now()
  route: CallRoute
  readonly outliving = false
  readonly #res: ServerResponse
  readonly #logger: Logger
  readonly #controller = new AbortController()
  #taker: AbortTaker | undefined

  constructor (req: IncomingMessage, res: ServerResponse, scope: RunScope, logger: Logger) {
    super()
    this.req = req
    this.#res = res
    this.#logger = logger
    this.out = new AnswerWriter(req, res)
    this.route = { ...scope, appPath: '/_runs', forwardedQuery: '', webhookEndpoint: undefined, accessToken: undefined, async: false }
    res.once('close', () => { if (!res.writableFinished) this.abort(new CallerGoneError()) })
  }

  get settled (): boolean { return this.out.writableEnded || this.#res.destroyed }
  get signal (): AbortSignal { return this.#controller.signal }

  answer (error: unknown): void {
    if (this.settled) return
    const ctx = { runId: this.runId, logger: this.#logger, internal: SIDECAR_INTERNAL }
    sendError(this.out, knownError(error, ctx), ctx)
  }

  abort (reason: Error): void {
    if (this.#controller.signal.aborted) return
    this.#controller.abort(reason)
    this.#taker?.abortFor(reason)
  }

  onAbort (taker: AbortTaker): void { this.#taker = taker }
  // nothing is held for a console request: no slot, no key, no drain count
  onClose (free: () => void): void { this.#res.once('close', free) }
  outlive (): void {}
  waited (): void {}
}
