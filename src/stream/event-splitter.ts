import { StringDecoder } from 'node:string_decoder'
import { createParser } from 'eventsource-parser'
import { NdjsonSplitter } from './ndjson-splitter.ts'

/** The response table's three stream rows: how an app body splits into events. */
export type StreamKind = 'event-stream' | 'ndjson' | 'chunks'

/** Splits an app body into event values as it arrives (for a run nobody is connected to). */
export interface EventSplitter {
  push: (chunk: Buffer) => void
  /** The body ended: a final line or chunk still counts. */
  end: () => void
}

/**
 * The events a caller would get from a `kind` stream, as values: the `data` of each server-sent
 * event, each non-empty NDJSON line, or each chunk read (as text).
 */
export function createEventSplitter (kind: StreamKind, onEvent: (data: string) => void): EventSplitter {
  if (kind === 'ndjson') {
    const splitter = new NdjsonSplitter()
    return { push: chunk => { splitter.push(chunk, onEvent) }, end: () => { splitter.flush(onEvent) } }
  }
  if (kind === 'event-stream') return createSseDataParser(onEvent)
  const decoder = new StringDecoder('utf8')
  const emit = (text: string): void => { if (text !== '') onEvent(text) }
  return { push: chunk => { emit(decoder.write(chunk)) }, end: () => { emit(decoder.end()) } }
}

/**
 * The `data` of each server-sent event in a byte stream, as the WHATWG parser reads it: UTF-8
 * decoded across reads, and a byte order mark at the start of the stream skipped.
 */
export function createSseDataParser (onEvent: (data: string) => void): EventSplitter {
  const decoder = new StringDecoder('utf8')
  const parser = createParser({ onEvent: event => { onEvent(event.data) } })
  let first = true
  const feed = (text: string): void => {
    if (first && text !== '') {
      first = false
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    parser.feed(text)
  }
  return { push: chunk => { feed(decoder.write(chunk)) }, end: () => { feed(decoder.end()) } }
}
