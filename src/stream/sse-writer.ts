import type { OutgoingHttpHeaders } from 'node:http'
import type { AnswerWriter } from '../shared/answer-writer.ts'
import type { StreamMetrics } from '../shared/metric-contracts.ts'
import { frameSseError, frameSseEvent, SSE_HEARTBEAT } from './sse-frame.ts'

/** Where a stream's bytes stand, for deciding whether a heartbeat comment may be inserted. */
type Boundary = 'event' | 'line' | 'mid-line'

const NL = 0x0a
const CR = 0x0d

/**
 * The caller's side of a server-sent event stream: the headers of docs/routes.md, "Streams",
 * flushed before the first event; each write goes out at once (no batching); `: keep-alive`
 * comments when idle; and an `event: error` to end a stream whose app failed.
 */
export class SseWriter {
  readonly #res: AnswerWriter
  readonly #metrics: StreamMetrics
  readonly #timer: NodeJS.Timeout | undefined
  #boundary: Boundary = 'event'
  #lastByte = NL
  #closed = false

  /** `timing`: the Server-Timing of a stream the app gives (a run's events have none). */
  constructor (res: AnswerWriter, runId: string, heartbeatMs: number, metrics: StreamMetrics, timing?: string) {
    this.#res = res
    this.#metrics = metrics
    const headers: OutgoingHttpHeaders = {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'x-accel-buffering': 'no',
      'x-request-id': runId
    }
    if (timing !== undefined) headers['server-timing'] = timing
    res.writeHead(200, headers)
    res.flushHeaders()
    metrics.sseStreams.inc()
    if (heartbeatMs > 0) {
      this.#timer = setTimeout(this.#beat, heartbeatMs)
      this.#timer.unref()
    }
    const closed = (): void => {
      this.#closed = true
      clearTimeout(this.#timer)
      metrics.sseStreams.dec()
    }
    // a recorded run's stream may begin after its caller left (it is kept for its Idempotency-Key)
    res.onClose(closed)
  }

  /** Sends one event whose data is `data`; false when the caller's buffer is full. */
  event (data: string): boolean {
    this.#metrics.sseEvents.inc()
    this.#timer?.refresh()
    return this.#res.write(frameSseEvent(data))
  }

  /** Sends `events` whole events already framed (the text ends at an event boundary). */
  framed (text: string, events: number): boolean {
    if (events > 0) this.#metrics.sseEvents.inc(events)
    this.#boundary = 'event'
    this.#lastByte = NL
    this.#timer?.refresh()
    return this.#res.write(text)
  }

  /** Sends bytes that are already SSE (passthrough), counting `events` complete events in them. */
  raw (bytes: Buffer, events: number): boolean {
    if (bytes.length === 0) return true // an empty read (undici passes some) leaves the stream where it was
    if (events > 0) this.#metrics.sseEvents.inc(events)
    this.#boundary = boundaryAfter(bytes, this.#lastByte)
    this.#lastByte = bytes[bytes.length - 1] ?? this.#lastByte
    this.#timer?.refresh()
    return this.#res.write(bytes)
  }

  /**
   * Ends the stream with `event: error` and `data: {"message": …}`, then `last` (a frame, if any);
   * also once the caller left (a recorded run keeps it).
   */
  fail (message: string, last = ''): void {
    if (this.#res.writableEnded) return
    clearTimeout(this.#timer)
    const close = this.#boundary === 'event' ? '' : '\n\n'
    this.#res.end(close + frameSseError(message) + last)
  }

  /** Ends the stream, after `last` (a frame, if any). */
  end (last?: string): void {
    // the last bytes may wait for a slow caller long after this: no heartbeat may follow the end
    clearTimeout(this.#timer)
    this.#res.end(last)
  }

  readonly #beat = (): void => {
    if (this.#closed || this.#res.writableEnded) return
    // a comment line is ignored anywhere, but only whole lines may be inserted, and only a
    // comment at an event boundary may carry the blank line
    if (this.#boundary === 'event') this.#res.write(SSE_HEARTBEAT)
    else if (this.#boundary === 'line') this.#res.write(': keep-alive\n')
    this.#timer?.refresh()
  }
}

/** Whether `bytes` (following a byte `before`) end at an event boundary, a line end, or mid-line. */
function boundaryAfter (bytes: Buffer, before: number): Boundary {
  const n = bytes.length
  if (n === 0) return 'event'
  const last = bytes[n - 1]
  if (last === CR) return 'mid-line' // a CR may be the first half of CRLF: wait for the next byte
  if (last !== NL) return 'mid-line'
  const prev = n >= 2 ? bytes[n - 2] : before
  if (prev === NL) return 'event'
  if (prev === CR) {
    const prev2 = n >= 3 ? bytes[n - 3] : (n === 2 ? before : undefined)
    return prev2 === NL ? 'event' : 'line'
  }
  return 'line'
}
