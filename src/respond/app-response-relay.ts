import type { IncomingHttpHeaders } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Dispatcher } from 'undici'
import { CallerDisconnectedError, CallerGoneError, DeadlineExceededError, ReplicaStoppedError, RunCanceledError, SidecarError } from '../errors.ts'
import { describeNetworkError } from '../shared/network-errors.ts'
import { AnswerWriter } from '../shared/answer-writer.ts'
import type { AnswerTee, ResponseSink, SinkContext } from '../shared/response-sink.ts'
import { attemptInterruption } from '../shared/attempt-interruption.ts'
import type { TraceSpan } from '../shared/trace-contracts.ts'
import type { CancelAtApp } from '../call/app-cancel.ts'
import type { AbortTaker } from '../call/call-record.ts'
import type { HttpCall } from '../call/http-call.ts'
import type { SinkChooser } from './response-table.ts'

/** What a webhook reports for a call whose caller left before a plain answer was complete. */
const CALLER_GONE = new CallerDisconnectedError()

/**
 * An undici dispatch handler that relays one upstream response to one caller: it picks a sink
 * when headers arrive, pauses the upstream when the caller cannot keep up, and aborts the
 * upstream when the caller disconnects (a recorded run's goes on), the deadline passes or the run
 * is canceled; then, with APP_CANCEL_PATH, the app is told too (once).
 */
export class AppResponseRelay implements Dispatcher.DispatchHandler, SinkContext, AbortTaker {
  /** The call's answer writer; one nobody reads once the call goes on as a run (outliveAsRun). */
  out: AnswerWriter
  readonly runId: string
  /** When the request was forwarded (run_time_ms counts from here). */
  readonly forwardedAt = performance.now()
  readonly queueMs: number
  readonly #call: HttpCall
  #tee: AnswerTee | undefined
  /** The app request's client span (tracing on). */
  readonly #span: TraceSpan | undefined
  #status = 0
  #controller: Dispatcher.DispatchController | undefined
  #sink: ResponseSink | undefined
  #callerGone = false
  /** Its caller left a recorded run: the app request goes on, answered for its Idempotency-Key alone. */
  #outlived = false
  #ended = false
  #expired: SidecarError | undefined
  /** The sink refused the body (too large to wrap, an event too large): the tee reports its error, not what was sent. */
  #refused = false
  readonly #choose: SinkChooser
  readonly #unreachable: (detail: string) => SidecarError
  /** APP_CANCEL_PATH's POST (undefined: unset); sent once, when the sidecar cut an app request still under way. */
  #cancelAtApp: CancelAtApp | undefined
  readonly #resume = (): void => { this.#controller?.resume() }

  constructor (call: HttpCall, choose: SinkChooser,
    unreachable: (detail: string) => SidecarError, tee?: AnswerTee, span?: TraceSpan, cancelAtApp?: CancelAtApp) {
    this.#call = call
    this.out = call.out
    this.runId = call.runId
    this.queueMs = call.queueMs
    this.#tee = tee
    this.#span = span
    if (tee !== undefined) call.out.result = tee.capture
    this.#choose = choose
    this.#unreachable = unreachable
    this.#cancelAtApp = cancelAtApp
    tee?.forwarded()
  }

  answer (error: SidecarError): void { this.#call.answer(error) }

  cut (error: SidecarError): void {
    this.#refused = true
    if (!this.out.headersSent) this.answer(error) // a begun stream has written its own end
    this.#controller?.abort(error)
  }

  /** The call aborted: its deadline passed, it was canceled, or its caller left. The app is told when its work was still under way. */
  abortFor (reason: Error): void {
    const underWay = !this.#ended // the abort may end the request before it returns
    if (reason instanceof DeadlineExceededError || reason instanceof RunCanceledError || reason instanceof ReplicaStoppedError) this.expire(reason)
    else this.callerGone()
    const cancelAtApp = this.#cancelAtApp
    if (cancelAtApp === undefined || !underWay) return
    this.#cancelAtApp = undefined
    cancelAtApp(this.runId)
  }

  /** The caller left: a recorded run's app request goes on to its end (its answer kept for its key); any other is cut. */
  outlivesCaller (): boolean {
    if (this.#outlived) return true // a run already (outliveAsRun): its caller was answered
    if (this.#call.recording === undefined || this.#ended) return false
    this.#outlived = true
    this.out.mute() // the answer is made all the same, for its key: nothing more goes to a socket that is gone
    this.#resume() // paused for the caller's reading, which is over
    return true
  }

  /**
   * The call goes on as a run, its caller answered otherwise (its `Prefer: wait` ran out, 202): from
   * now on the app's answer is followed by `tee` alone (the run's record, and the webhook's), the
   * sinks writing into a writer nobody reads; the call holds its slot until the app request ends.
   * False when the app's response has begun (it goes on to the caller); `makeTee` is called only
   * when the call does go on as a run (a tee made for nothing would take over the call's webhook).
   */
  outliveAsRun (makeTee: () => AnswerTee): boolean {
    if (this.#sink !== undefined || this.#ended || this.#callerGone || this.#expired !== undefined) return false
    const tee = makeTee()
    this.#tee = tee
    this.out = AnswerWriter.unread(this.out.req)
    this.out.result = tee.capture
    this.#outlived = true
    return true
  }

  /** The caller disconnected before the response was complete. */
  callerGone (): void {
    this.#callerGone = true
    this.#controller?.abort(new CallerGoneError())
  }

  /** The call's deadline passed (or it was canceled): cut the app request; the caller gets 504 (499) or an error event on a stream. */
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
    this.#status = status
    this.#sink = this.#choose(this, status, headers)
  }

  onResponseData (controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!(this.#sink as ResponseSink).write(chunk) && !this.#callerGone && !this.#outlived) {
      controller.pause()
      this.out.onDrain(this.#resume)
    }
  }

  onResponseEnd (): void {
    (this.#sink as ResponseSink).end()
    this.#ended = true
    this.#span?.end(this.#status)
    this.#tee?.finish()
    if (this.#outlived) this.#outlivedOnceWritten()
  }

  /**
   * | why the app request failed        | the caller gets                                   | the webhook reports        |
   * | the deadline passed               | 504 (a begun response: the sink's failure)        | the 504                    |
   * | the run was canceled              | 499 run canceled (likewise)                       | the 499                    |
   * | the caller left                   | nothing more: the connection is cut               | 499                        |
   * | the app failed mid-response       | the sink's failure (an error event, a 502, a cut) | a 502                      |
   * | the sink refused the body (too large to wrap, an event too large) | its 502 (a stream: its error event) | that 502 |
   * | the request body was refused (413) | that error, and the connection closes            | nothing (app never answered) |
   * | the app could not be reached      | 502                                               | the 502                    |
   * A stream's webhook reports the events sent instead, with status 200.
   */
  onResponseError (_controller: Dispatcher.DispatchController, cause: Error): void {
    this.#ended = true
    this.#span?.end(this.#status, describeNetworkError(cause))
    const sink = this.#sink
    let reported: SidecarError
    if (this.#expired !== undefined && !this.#callerGone) {
      reported = this.#expired
      if (sink === undefined) this.answer(reported)
      else sink.fail(reported)
    } else if (this.#callerGone || cause instanceof CallerGoneError) {
      reported = CALLER_GONE
      this.out.destroy()
    } else if (sink !== undefined) {
      reported = cause instanceof SidecarError ? cause : this.#unreachable(describeNetworkError(cause))
      sink.fail(cause)
    } else if (cause instanceof SidecarError) {
      this.answer(cause)
      this.#tee?.cancel()
      if (this.#outlived) this.#outlivedOnceWritten()
      return
    } else {
      reported = this.#unreachable(describeNetworkError(cause))
      this.answer(reported)
    }
    // a run's attempt interrupted (its replica stopped, its app gone before it answered): a run with attempts left runs again
    const interrupted = this.#outlived && !this.#callerGone && !(cause instanceof CallerGoneError)
      ? attemptInterruption(this.#expired, sink !== undefined, cause)
      : undefined
    if (sink?.streaming === true && !this.#refused && interrupted === undefined) this.#tee?.finish()
    else this.#tee?.finishWith(reported.status, reported.body(), interrupted)
    if (this.#outlived) this.#outlivedOnceWritten()
  }

  /**
   * A call that outlived its caller holds its slot and its drain count until its run's end is
   * written (a drain closes the run store only after that), not just until the app answered.
   */
  #outlivedOnceWritten (): void {
    const written = this.#tee?.written
    if (written === undefined) this.#call.outlived()
    else void written.then(() => { this.#call.outlived() }, () => { this.#call.outlived() })
  }
}
