import type { IncomingHttpHeaders } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Dispatcher } from 'undici'
import { AppUnreachableError, EventTooLargeError, RunCanceledError, SidecarError } from '../../errors.ts'
import { CANCELED_MESSAGE, CANCELED_RESULT, CANCELED_STATUS } from '../run-record.ts'
import type { InterruptionReason, RunOutcome } from '../run-data.ts'
import { attemptInterruption } from '../../shared/attempt-interruption.ts'
import { describeNetworkError } from '../../shared/network-errors.ts'
import { createEventSplitter, type EventSplitter } from '../../stream/event-splitter.ts'
import { ResultCapture } from '../../webhook/result-capture.ts'
import { hasReadableBody, streamKind } from '../../respond/response-table.ts'

/** What a run relay needs to know of the run it carries. */
export interface RunRelayOptions {
  readonly method: string
  /** The caller's Accept, as stored: it picks the chunked stream row. */
  readonly accept: string | undefined
  /** Most bytes of a result kept (ENVELOPE_MAX_BODY_BYTES): a larger body fails the run with 502; a larger stream keeps `null`. */
  readonly maxResultBytes: number
  /** STREAM_MAX_EVENT_BYTES: a longer event fails the run with 502 and cuts the app request. */
  readonly maxEventBytes: number
  /** Each event of a streamed answer, numbered from 0, as it arrives. */
  readonly onEvent: (n: number, data: string) => void
  /** APP_URL, as a failure's log reason names it. */
  readonly appUrl: string
  /** APP_CANCEL_PATH's POST for this run (undefined: unset): the sidecar cut the app request, not the app. */
  readonly cancelAtApp?: (() => void) | undefined
}

/**
 * An undici dispatch handler that consumes the app's answer to an async run (nobody is connected
 * to it): the body, or the events of the stream rows (docs/routes.md, "Response table"), become
 * the run's result; it resolves `outcome` once, however the request ends (its end, the app
 * failing, a cancel, the deadline, the end of the grace period).
 */
export class RunRelay implements Dispatcher.DispatchHandler {
  readonly outcome: Promise<RunOutcome>
  readonly #options: RunRelayOptions
  readonly #capture: ResultCapture
  readonly #forwardedAt = performance.now()
  #resolve!: (outcome: RunOutcome) => void
  #controller: Dispatcher.DispatchController | undefined
  #cut: SidecarError | undefined
  #status = 0
  #splitter: EventSplitter | undefined
  #events = 0
  #settled = false

  constructor (options: RunRelayOptions) {
    this.#options = options
    this.#capture = new ResultCapture(options.maxResultBytes)
    this.outcome = new Promise(resolve => { this.#resolve = resolve })
  }

  /** Cuts the app request; the run ends with `reason` (a cancel, the deadline, the grace period's end); the app is told unless the event was its own. */
  abort (reason: SidecarError): void {
    if (this.#settled || this.#cut !== undefined) return
    this.#cut = reason
    this.#controller?.abort(reason)
    if (!(reason instanceof EventTooLargeError)) this.#options.cancelAtApp?.()
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#cut !== undefined) controller.abort(this.#cut)
  }

  onResponseStart (_controller: Dispatcher.DispatchController, status: number, headers: IncomingHttpHeaders): void {
    this.#status = status
    this.#capture.status = status
    if (!hasReadableBody(this.#options.method, status, headers)) return
    const kind = streamKind(headers, this.#options.accept)
    if (kind === undefined) return
    this.#capture.status = 200
    this.#splitter = createEventSplitter(kind, data => {
      this.#capture.event(data)
      this.#options.onEvent(this.#events++, data)
    }, this.#options.maxEventBytes)
  }

  onResponseData (controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#splitter !== undefined) {
      if (!this.#splitter.push(chunk)) this.abort(new EventTooLargeError(this.#options.maxEventBytes))
      return
    }
    this.#capture.body(chunk)
    if (this.#capture.truncated) {
      controller.abort(new AppUnreachableError(`response body over ENVELOPE_MAX_BODY_BYTES (${this.#options.maxResultBytes} bytes)`))
    }
  }

  onResponseEnd (): void {
    const cutBefore = this.#cut
    this.#splitter?.end()
    const cut = this.#cut
    if (cut !== cutBefore && cut !== undefined) {
      // the last event broke the run (a store write that threw): it ends with that error
      this.#settle('failed', cut.status, cut.body(), cut.message)
      return
    }
    const status = this.#capture.status
    const failed = status < 200 || status >= 300
    this.#settle(failed ? 'failed' : 'succeeded', status, this.#capture.resultJson(), failed ? `app answered ${this.#status}` : undefined)
  }

  /**
   * | why the app request ended early    | the run                                              |
   * | canceled                           | canceled, 499 `{"message": "run canceled"}`          |
   * | the deadline, the grace period end | failed, 504 / 503 with the sidecar's error           |
   * | an event over STREAM_MAX_EVENT_BYTES | failed, 502 with that error                        |
   * | a stream that had begun failed     | failed, 502; its result the events so far            |
   * | anything else                      | failed, 502 app unreachable (or a body too large)    |
   *
   * The grace period's end, and the app unreachable before it answered, interrupt the attempt:
   * a run with attempts left runs again (docs/runs.md, "Running on interruptible capacity").
   */
  onResponseError (_controller: Dispatcher.DispatchController, cause: Error): void {
    const cut = this.#cut
    if (cut instanceof RunCanceledError) {
      this.#settle('canceled', CANCELED_STATUS, CANCELED_RESULT, CANCELED_MESSAGE)
      return
    }
    const error = cut ?? (cause instanceof SidecarError
      ? cause
      : new AppUnreachableError(this.#splitter === undefined ? describeNetworkError(cause) : `app failed mid-stream: ${describeNetworkError(cause)}`, this.#options.appUrl))
    const resultJson = this.#splitter !== undefined && cut === undefined ? this.#capture.resultJson() : error.body()
    this.#settle('failed', error.status, resultJson, error.message, attemptInterruption(cut, this.#status !== 0, cause))
  }

  #settle (status: RunOutcome['status'], statusCode: number, resultJson: string, error: string | undefined, interrupted?: InterruptionReason): void {
    if (this.#settled) return
    this.#settled = true
    const runTimeMs = performance.now() - this.#forwardedAt
    const outcome: RunOutcome = { status, statusCode, resultJson, runTimeMs, error, completedAt: Date.now() }
    this.#resolve(interrupted === undefined ? outcome : { ...outcome, interrupted })
  }
}

/** The outcome of a run canceled before it reached the app. */
export function canceledOutcome (): RunOutcome {
  return { status: 'canceled', statusCode: CANCELED_STATUS, resultJson: CANCELED_RESULT, runTimeMs: 0, error: CANCELED_MESSAGE, completedAt: Date.now() }
}
