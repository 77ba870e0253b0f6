import { once } from 'node:events'
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http'

/** What the caller's answer means (the app's status and body, or its events), for the call's webhook and its run's record: sinks feed it as they write. */
export interface ResponseCapture {
  /** The status the caller got (200 for a stream). */
  status: number
  body: (chunk: Buffer) => void
  event: (data: string) => void
}

/** What an answer is written to: a caller's response, or a call's AnswerWriter (the same calls). */
export interface AnswerOut {
  readonly req: IncomingMessage
  readonly headersSent: boolean
  readonly writableEnded: boolean
  writeHead: (status: number, headers: OutgoingHttpHeaders) => unknown
  end: (chunk?: string | Buffer) => unknown
  destroy: () => unknown
}

/**
 * Something that observes what a call's caller gets, byte for byte (a kept Idempotency-Key
 * answer). Its `ending` may hold the end back until what it keeps is kept: the caller never has
 * its last byte before a repeat would find the answer.
 */
export interface AnswerTap {
  head?: (status: number, headers: OutgoingHttpHeaders) => void
  bytes?: (chunk: string | Buffer) => void
  ending?: () => PromiseLike<unknown> | undefined
}

/**
 * The one writer of a call's answer: every stage, sink and error of a `/v4` call writes through
 * it. Its observers: the taps (bytes as sent), and `result`, what the app's answer means for the
 * call's webhook and its run's record (the sinks feed it the app's body or its events, not the
 * envelope around them). A plain call has neither, and its writes go straight to the response.
 * A muted writer (its caller left a recorded run; or it never had one: the caller got its 202)
 * sends nothing anywhere and never pauses the app; its taps and `result` still see everything.
 */
export class AnswerWriter implements AnswerOut {
  readonly req: IncomingMessage
  result: ResponseCapture | undefined = undefined
  #res: ServerResponse | undefined
  #taps: AnswerTap[] | undefined = undefined
  #headSent = false
  #ended = false

  constructor (req: IncomingMessage, res: ServerResponse | undefined) {
    this.req = req
    this.#res = res
  }

  /** A writer whose answer nobody reads (a call that goes on as a run, its caller answered 202). */
  static unread (req: IncomingMessage): AnswerWriter { return new AnswerWriter(req, undefined) }

  tap (tap: AnswerTap): void { (this.#taps ??= []).push(tap) }

  /** From now on nothing reaches the caller's socket (it is gone); taps and `result` go on. */
  mute (): void { this.#res = undefined }

  get headersSent (): boolean { return this.#headSent || this.#res?.headersSent === true }
  get writableEnded (): boolean { return this.#ended || this.#res?.writableEnded === true }
  /** Nothing written reaches anyone: the caller's connection is gone, or the writer is muted. */
  get destroyed (): boolean { return this.#res === undefined || this.#res.destroyed }

  writeHead (status: number, headers: OutgoingHttpHeaders): this {
    this.#headSent = true
    const taps = this.#taps
    if (taps !== undefined) for (const tap of taps) tap.head?.(status, headers)
    this.#res?.writeHead(status, headers)
    return this
  }

  /** False asks the writer of the app's body to wait for `onDrain`. */
  write (chunk: string | Buffer): boolean {
    const taps = this.#taps
    if (taps !== undefined) for (const tap of taps) tap.bytes?.(chunk)
    return this.#res === undefined ? true : this.#res.write(chunk)
  }

  end (chunk?: string | Buffer): this {
    if (this.#ended) return this
    this.#ended = true
    const taps = this.#taps
    if (taps === undefined) {
      this.#res?.end(chunk)
      return this
    }
    if (chunk !== undefined) for (const tap of taps) tap.bytes?.(chunk)
    let holding: Array<PromiseLike<unknown>> | undefined
    for (const tap of taps) {
      const held = tap.ending?.()
      if (held !== undefined) (holding ??= []).push(held)
    }
    // a muted writer's response (its caller gone) still ends, with no byte for the socket
    const finish = (): void => { this.#res?.end(chunk) }
    if (holding === undefined) finish()
    else void Promise.allSettled(holding).then(finish)
    return this
  }

  destroy (): void { this.#res?.destroy() }
  /** A header every answer of the call carries (CORS), whoever writes its head. */
  setHeader (name: string, value: string): void { this.#res?.setHeader(name, value) }
  flushHeaders (): void { this.#res?.flushHeaders() }
  cork (): void { this.#res?.cork() }
  uncork (): void { this.#res?.uncork() }
  onDrain (listener: () => void): void { this.#res?.once('drain', listener) }
  /** Settles when the caller has read what was written, or `signal` aborts. */
  async drained (signal: AbortSignal): Promise<void> {
    if (this.#res !== undefined) await once(this.#res, 'drain', { signal }).catch(() => {})
  }
  /** `listener` runs when the caller's connection closes, or at once when nothing reaches it. */
  onClose (listener: () => void): void {
    const res = this.#res
    if (res === undefined || res.destroyed) listener()
    else res.once('close', listener)
  }
}
