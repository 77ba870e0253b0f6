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
  const decoder = new StringDecoder('utf8')
  if (kind === 'event-stream') {
    const parser = createParser({ onEvent: event => { onEvent(event.data) } })
    return { push: chunk => { parser.feed(decoder.write(chunk)) }, end: () => { parser.feed(decoder.end()) } }
  }
  const emit = (text: string): void => { if (text !== '') onEvent(text) }
  return { push: chunk => { emit(decoder.write(chunk)) }, end: () => { emit(decoder.end()) } }
}
