import { StringDecoder } from 'node:string_decoder'
import { EventTooLargeError, SidecarError } from '../errors.ts'
import { describeNetworkError } from '../shared/network-errors.ts'
import type { StreamMetrics } from '../shared/metric-contracts.ts'
import type { ResponseSink, SinkContext } from '../shared/response-sink.ts'
import { serverTiming } from '../shared/server-timing.ts'
import { createSseDataParser } from './event-splitter.ts'
import { NdjsonSplitter } from './ndjson-splitter.ts'
import { frameSseDone } from './sse-frame.ts'
import { SseWriter } from './sse-writer.ts'

export interface StreamSinkDeps {
  readonly metrics: StreamMetrics
  readonly heartbeatMs: number
  /** STREAM_MAX_EVENT_BYTES: a longer event ends the stream with an error event and cuts the app request. */
  readonly maxEventBytes: number
}

/** The three ways an app response becomes a server-sent event stream. */
export interface StreamSinks {
  /** `text/event-stream` from the app: the same bytes, flushed as they arrive. */
  eventStream: (ctx: SinkContext) => ResponseSink
  /** `application/x-ndjson` / `application/jsonl`: one event per non-empty line, then `id: <run_id>.done`. */
  ndjson: (ctx: SinkContext) => ResponseSink
  /** Any chunked body for a caller that accepts SSE: one event per chunk read, then `id: <run_id>.done`. */
  chunks: (ctx: SinkContext) => ResponseSink
}

/** The message of the closing error event: the sidecar's own (a deadline), or the app's failure. */
const failure = (error: Error): string =>
  error instanceof SidecarError ? error.message : `app failed mid-stream: ${describeNetworkError(error)}`

export function createStreamSinks (deps: StreamSinkDeps): StreamSinks {
  const open = (ctx: SinkContext): SseWriter => {
    if (ctx.out.result !== undefined) ctx.out.result.status = 200
    return new SseWriter(ctx.out, ctx.runId, deps.heartbeatMs, deps.metrics, serverTiming(ctx.queueMs))
  }
  const tooLarge = new EventTooLargeError(deps.maxEventBytes)
  /** An event over STREAM_MAX_EVENT_BYTES: the error event (then `last`, a converted stream's end frame), and the app request cut. */
  const refuse = (ctx: SinkContext, writer: SseWriter, last?: string): true => {
    writer.fail(tooLarge.message, last)
    ctx.cut(tooLarge)
    return true
  }

  return {
    eventStream (ctx) {
      const capture = ctx.out.result
      const writer = open(ctx)
      let events = 0
      const parser = createSseDataParser(data => { events++; capture?.event(data) }, deps.maxEventBytes)
      return {
        write: chunk => {
          events = 0
          if (!parser.push(chunk)) return refuse(ctx, writer)
          return writer.raw(chunk, events)
        },
        end: () => { writer.end() },
        fail: error => { writer.fail(failure(error)) },
        streaming: true
      }
    },

    ndjson (ctx) {
      const capture = ctx.out.result
      const writer = open(ctx)
      const splitter = new NdjsonSplitter(deps.maxEventBytes)
      let writable = true
      const onLine = (line: string): void => {
        capture?.event(line)
        writable = writer.event(line) && writable
      }
      return {
        write: chunk => {
          writable = true
          if (!splitter.push(chunk, onLine)) return refuse(ctx, writer, frameSseDone(ctx.runId))
          return writable
        },
        end: () => {
          if (splitter.flush(onLine)) writer.end(frameSseDone(ctx.runId))
          else refuse(ctx, writer, frameSseDone(ctx.runId))
        },
        fail: error => {
          writer.fail(failure(error), frameSseDone(ctx.runId))
        },
        streaming: true
      }
    },

    chunks (ctx) {
      const capture = ctx.out.result
      const writer = open(ctx)
      const decoder = new StringDecoder('utf8')
      const emit = (text: string): boolean => {
        if (text === '') return true
        capture?.event(text)
        return writer.event(text)
      }
      return {
        write: chunk => emit(decoder.write(chunk)),
        end: () => {
          emit(decoder.end())
          writer.end(frameSseDone(ctx.runId))
        },
        fail: error => { writer.fail(failure(error), frameSseDone(ctx.runId)) },
        streaming: true
      }
    }
  }
}
