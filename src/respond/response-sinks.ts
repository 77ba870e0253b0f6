import type { IncomingHttpHeaders } from 'node:http'
import { performance } from 'node:perf_hooks'
import { AppUnreachableError, SidecarError } from '../errors.ts'
import { describeNetworkError } from '../shared/network-errors.ts'
import { callerResponseHeaders } from '../call/forward-headers.ts'
import { roundedMs } from '../shared/run-result.ts'
import { serverTiming } from '../shared/server-timing.ts'
import { envelopeParts, envelopeText } from './response-envelope.ts'
import { JsonSyntax } from '../shared/json-syntax.ts'
import type { ResponseSink, SinkContext } from '../shared/response-sink.ts'

/** Status, headers and body as the app sent them (hop-by-hop headers aside; `corsOwned`: see callerResponseHeaders). */
export function passthroughSink (ctx: SinkContext, status: number, headers: IncomingHttpHeaders, corsOwned = false): ResponseSink {
  const { out } = ctx
  const capture = out.result
  out.writeHead(status, callerResponseHeaders(headers, ctx.runId, serverTiming(ctx.queueMs), false, corsOwned))
  if (capture !== undefined) capture.status = status
  return {
    write: chunk => {
      capture?.body(chunk)
      return out.write(chunk)
    },
    end: () => { out.end() },
    fail: () => { out.destroy() },
    streaming: false
  }
}

/** Bodies up to this size are enveloped as one string and written at once. */
const ONE_WRITE_BYTES = 64 * 1024

/**
 * The cortex runtime's 2xx answer: the whole body, wrapped as `{run_id, result, run_time_ms, timestamp}`.
 * A body over `maxBytes` (ENVELOPE_MAX_BODY_BYTES) is answered 502 and the app request cut at once.
 */
export function envelopeSink (ctx: SinkContext, status: number, headers: IncomingHttpHeaders, maxBytes: number, corsOwned = false): ResponseSink {
  const chunks: Buffer[] = []
  const syntax = new JsonSyntax()
  let size = 0
  let refused = false
  const { out } = ctx
  const capture = out.result
  if (capture !== undefined) capture.status = status
  return {
    streaming: false,
    write: chunk => {
      if (refused) return true
      capture?.body(chunk)
      size += chunk.length
      if (size > maxBytes) {
        refused = true
        chunks.length = 0
        ctx.cut(new AppUnreachableError(`response body over ENVELOPE_MAX_BODY_BYTES (${maxBytes} bytes)`))
        return true
      }
      syntax.push(chunk)
      chunks.push(chunk)
      return true
    },
    end: () => {
      if (refused) return
      const runTimeMs = roundedMs(performance.now() - ctx.forwardedAt)
      const timestamp = new Date().toISOString()
      const head = callerResponseHeaders(headers, ctx.runId, serverTiming(ctx.queueMs, runTimeMs), true, corsOwned)
      head['content-type'] = 'application/json; charset=utf-8'
      // a small envelope is one string, sent with the head in one write; a large one goes as its parts, no copy
      if (size <= ONE_WRITE_BYTES) {
        const text = envelopeText(ctx.runId, chunks.length === 1 ? chunks[0] as Buffer : Buffer.concat(chunks, size), syntax.end(), runTimeMs, timestamp)
        head['content-length'] = Buffer.byteLength(text)
        out.writeHead(status, head)
        out.end(text)
        return
      }
      const parts = envelopeParts(ctx.runId, chunks, syntax.end(), runTimeMs, timestamp)
      let length = 0
      for (const part of parts) length += part.length
      head['content-length'] = length
      out.writeHead(status, head)
      out.cork()
      const last = parts.length - 1
      for (let i = 0; i < last; i++) out.write(parts[i] as Buffer)
      out.end(parts[last])
      out.uncork()
    },
    fail: error => {
      ctx.answer(error instanceof SidecarError ? error : new AppUnreachableError(describeNetworkError(error)))
    }
  }
}
