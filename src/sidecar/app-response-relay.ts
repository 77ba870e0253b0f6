import type { IncomingHttpHeaders, ServerResponse } from 'node:http'
import type { Dispatcher } from 'undici'
import { AppUnreachableError, SidecarError } from '../errors.ts'
import { sendError } from './error-response.ts'
import { describeNetworkError } from './network-error.ts'
import type { ResponseSink, SinkContext } from './response-sinks.ts'
import type { WebhookTee } from '../webhook/webhook-tee.ts'

/** Picks the sink for an app response once its status and headers are known. */
export type SinkChooser = (ctx: SinkContext, status: number, headers: IncomingHttpHeaders) => ResponseSink

/** Raised into the app request when the caller goes away, so undici drops it at once. */
export class CallerGoneError extends Error {
  constructor () { super('caller disconnected') }
}

/**
 * An undici dispatch handler that relays one upstream response to one caller: it picks a sink
 * when headers arrive, pauses the upstream when the caller cannot keep up, and aborts the
 * upstream when the caller disconnects.
 */
export class AppResponseRelay implements Dispatcher.DispatchHandler, SinkContext {
  readonly res: ServerResponse
  readonly runId: string
  readonly tee: WebhookTee | undefined
  forwardedAt = 0
  #controller: Dispatcher.DispatchController | undefined
  #sink: ResponseSink | undefined
  #callerGone = false
  #expired: SidecarError | undefined
  readonly #choose: SinkChooser
  readonly #unreachable: (detail: string) => SidecarError
  readonly #resume = (): void => { this.#controller?.resume() }

  constructor (res: ServerResponse, runId: string, choose: SinkChooser,
    unreachable: (detail: string) => SidecarError = detail => new AppUnreachableError(detail), tee?: WebhookTee) {
    this.res = res
    this.runId = runId
    this.tee = tee
    this.#choose = choose
    this.#unreachable = unreachable
  }

  /** The caller disconnected before the response was complete. */
  callerGone (): void {
    this.#callerGone = true
    this.#controller?.abort(new CallerGoneError())
  }

  /** The call's deadline passed: cut the app request; the caller gets 504 (or an error event on a stream). */
  expire (error: SidecarError): void {
    this.#expired = error
    this.#controller?.abort(error)
  }

  onRequestStart (controller: Dispatcher.DispatchController): void {
    this.#controller = controller
    if (this.#callerGone) controller.abort(new CallerGoneError())
    else if (this.#expired !== undefined) controller.abort(this.#expired)
  }

  onResponseStart (_controller: Dispatcher.DispatchController, status: number, headers: IncomingHttpHeaders): void {
    this.#sink = this.#choose(this, status, headers)
  }

  onResponseData (controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!(this.#sink as ResponseSink).write(chunk) && !this.#callerGone) {
      controller.pause()
      this.res.once('drain', this.#resume)
    }
  }

  onResponseEnd (): void {
    (this.#sink as ResponseSink).end()
    this.tee?.finish()
  }

  onResponseError (_controller: Dispatcher.DispatchController, error: Error): void {
    const sink = this.#sink
    const expired = this.#expired
    if (expired !== undefined && !this.#callerGone) {
      // a stream ends with an error event and reports the events sent; anything else is a 504
      sink?.fail(expired)
      if (sink?.streaming === true) this.tee?.finish()
      else {
        if (sink === undefined) sendError(this.res, this.runId, expired)
        this.tee?.finishWith(expired.status, expired.body())
      }
    } else if (error instanceof CallerGoneError || this.#callerGone) {
      this.res.destroy()
      // a stream reports the events sent; a plain call had no answer to report
      if (sink?.streaming === true) this.tee?.finish()
      else this.tee?.finishWith(499, '{"message":"caller disconnected"}')
    } else if (sink !== undefined) {
      sink.fail(error)
      if (sink.streaming) this.tee?.finish()
      else this.tee?.finishWith(502, this.#unreachable(describeNetworkError(error)).body())
    } else if (error instanceof SidecarError) {
      sendError(this.res, this.runId, error, true)
      this.tee?.cancel()
    } else {
      const answer = this.#unreachable(describeNetworkError(error))
      sendError(this.res, this.runId, answer)
      this.tee?.finishWith(answer.status, answer.body())
    }
  }
}
