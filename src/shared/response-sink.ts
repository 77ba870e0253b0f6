import type { SidecarError } from '../errors.ts'
import type { AnswerWriter, ResponseCapture } from './answer-writer.ts'
import type { InterruptionReason } from './metric-contracts.ts'

/** Where an app response goes: each kind of response the caller can get is one sink. */
export interface ResponseSink {
  /** Writes one chunk of the app's body; false asks the relay to pause reading from the app. */
  write: (chunk: Buffer) => boolean
  /** The app's body has ended. */
  end: () => void
  /** The app failed after its response began. */
  fail: (error: Error) => void
  /** A server-sent event stream (its webhook reports the events sent, with status 200). */
  readonly streaming: boolean
}

/**
 * Who follows a forwarded call's answer besides its caller (its webhook, its run record): the
 * sinks feed `capture` as they write, the relay says when the request went out and how it ended.
 */
export interface AnswerTee {
  readonly capture: ResponseCapture
  /** The request went to the app now (run_time_ms counts from here). */
  forwarded: () => void
  /** The response is over: report what the caller got. */
  finish: () => void
  /**
   * The caller got the sidecar's own answer instead (a 502, a 504, 499 gone): report that.
   * `interrupted`: a call gone on as a run whose attempt was interrupted (a run with attempts left runs again).
   */
  finishWith: (status: number, body: string, interrupted?: InterruptionReason) => void
  /** The call was refused before the app could answer it (413). */
  cancel: () => void
  /** Settles once what the tee reported is written (a recorded run's end in the run store); undefined: nothing to wait for. */
  readonly written?: Promise<unknown> | undefined
}

/** What a sink needs to know of the call it answers. */
export interface SinkContext {
  /** The call's answer writer; its `result`, set when the call asked for a webhook or is a run, is fed as the sinks write. */
  readonly out: AnswerWriter
  readonly runId: string
  /** When the request was forwarded (performance.now()). */
  readonly forwardedAt: number
  /** How long the call waited for its slot, in ms (Server-Timing's `queue`). */
  readonly queueMs: number
  /** Answers with the sidecar's own JSON error (the response has not begun). */
  answer: (error: SidecarError) => void
  /**
   * Answers with the sidecar's own error (unless the response has begun: then the sink has ended it)
   * and cuts the app request (the sink will not take the rest); its tee reports that error.
   */
  cut: (error: SidecarError) => void
}
