import { StringDecoder } from 'node:string_decoder'
import { createParser } from 'eventsource-parser'
import { NdjsonSplitter } from './ndjson-splitter.ts'

/** The response table's three stream rows: how an app body splits into events. */
export type StreamKind = 'event-stream' | 'ndjson' | 'chunks'

/** Splits an app body into event values as it arrives (for a run nobody is connected to). */
export interface EventSplitter {
  /** False once an event is longer than the bound (STREAM_MAX_EVENT_BYTES): nothing more is split. */
  push: (chunk: Buffer) => boolean
  /** The body ended: a final line or chunk still counts. */
  end: () => void
}

/**
 * The events a caller would get from a `kind` stream, as values: the `data` of each server-sent
 * event, each non-empty NDJSON line, or each chunk read (as text; a read is never over the bound).
 */
export function createEventSplitter (kind: StreamKind, onEvent: (data: string) => void, maxEventBytes: number): EventSplitter {
  if (kind === 'ndjson') {
    const splitter = new NdjsonSplitter(maxEventBytes)
    return { push: chunk => splitter.push(chunk, onEvent), end: () => { splitter.flush(onEvent) } }
  }
  if (kind === 'event-stream') return createSseDataParser(onEvent, maxEventBytes)
  const decoder = new StringDecoder('utf8')
  const emit = (text: string): void => { if (text !== '') onEvent(text) }
  return { push: chunk => { emit(decoder.write(chunk)); return true }, end: () => { emit(decoder.end()) } }
}

/**
 * The `data` of each server-sent event in a byte stream, as the WHATWG parser reads it: UTF-8
 * decoded across reads, and a byte order mark at the start of the stream skipped. An event whose
 * bytes pass `maxEventBytes` stops the parsing, whether its blank line is still to come or in the
 * very read that passes the bound: that read is not parsed, so no event over the bound is passed on.
 */
export function createSseDataParser (onEvent: (data: string) => void, maxEventBytes: number): EventSplitter {
  const decoder = new StringDecoder('utf8')
  const parser = createParser({ onEvent: event => { onEvent(event.data) } })
  const size = new SseEventSize(maxEventBytes)
  let first = true
  let over = false
  const feed = (text: string): void => {
    if (first && text !== '') {
      first = false
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    parser.feed(text)
  }
  return {
    push: chunk => {
      if (over || size.passes(chunk)) {
        over = true
        return false
      }
      feed(decoder.write(chunk))
      return true
    },
    end: () => { if (!over) feed(decoder.end()) }
  }
}

const LF = 0x0a
const CR = 0x0d
/** Two line ends in a row (a blank line: an event's end) always hold one of these: LF LF, LF CR, CR CR. */
const BLANK_LINES = [Buffer.from('\n\n'), Buffer.from('\n\r'), Buffer.from('\r\r')]

/** Where the first blank line in `chunk` at or after `from` ends; -1: none. */
function firstBlankEnd (chunk: Buffer, from: number): number {
  let end = -1
  for (const blank of BLANK_LINES) {
    const at = chunk.indexOf(blank, from)
    if (at !== -1 && (end === -1 || at + 2 < end)) end = at + 2
  }
  return end
}

/** Where the last blank line in `chunk` ends; -1: none. */
function lastBlankEnd (chunk: Buffer): number {
  let end = -1
  for (const blank of BLANK_LINES) {
    const at = chunk.lastIndexOf(blank)
    if (at !== -1 && at + 2 > end) end = at + 2
  }
  return end
}

/** The size of each event of a server-sent event stream, read by read, against a bound. */
class SseEventSize {
  readonly #max: number
  /** The bytes since the last blank line: the event under way. */
  #since = 0
  #lastByte = LF

  constructor (maxEventBytes: number) {
    this.#max = maxEventBytes
  }

  /** Counts `chunk`: true when an event it ends, holds or begins has passed the bound. */
  passes (chunk: Buffer): boolean {
    const head = chunk[0]
    // the blank line may span two reads: the last byte before and this read's first
    const spans = (this.#lastByte === LF && (head === LF || head === CR)) || (this.#lastByte === CR && head === CR)
    this.#lastByte = chunk[chunk.length - 1] ?? this.#lastByte
    const first = spans ? 1 : firstBlankEnd(chunk, 0)
    if (first === -1) return (this.#since += chunk.length) > this.#max
    // the event under way ends in this read
    if (this.#since + first > this.#max) return true
    // the events wholly inside this read fit when the read does
    if (chunk.length > this.#max) {
      for (let end = first, next = firstBlankEnd(chunk, end); next !== -1; end = next, next = firstBlankEnd(chunk, end)) {
        if (next - end > this.#max) return true
      }
    }
    this.#since = chunk.length - Math.max(first, lastBlankEnd(chunk))
    return this.#since > this.#max
  }
}
