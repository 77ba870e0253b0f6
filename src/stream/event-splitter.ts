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
 * bytes pass `maxEventBytes` before its blank line stops the parsing (the read that passes it is
 * not parsed: no event ends in it when a read is no longer than the bound).
 */
export function createSseDataParser (onEvent: (data: string) => void, maxEventBytes: number): EventSplitter {
  const decoder = new StringDecoder('utf8')
  const parser = createParser({ onEvent: event => { onEvent(event.data) } })
  const size = new SseEventSize()
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
      if (over || size.add(chunk) > maxEventBytes) {
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

/** The bytes of a server-sent event stream since its last blank line: the size of the event under way. */
class SseEventSize {
  #since = 0
  #lastByte = LF

  /** Counts `chunk`; the event's bytes so far. */
  add (chunk: Buffer): number {
    let end = -1
    for (const blank of BLANK_LINES) {
      const at = chunk.lastIndexOf(blank)
      if (at !== -1 && at + 2 > end) end = at + 2
    }
    const first = chunk[0]
    if (end === -1 && ((this.#lastByte === LF && (first === LF || first === CR)) || (this.#lastByte === CR && first === CR))) end = 1
    this.#since = end === -1 ? this.#since + chunk.length : chunk.length - end
    this.#lastByte = chunk[chunk.length - 1] ?? this.#lastByte
    return this.#since
  }
}
