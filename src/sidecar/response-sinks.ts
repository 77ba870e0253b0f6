import type { IncomingHttpHeaders, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import { AppUnreachableError, SidecarError } from '../errors.ts'
import { describeNetworkError } from '../shared/network-errors.ts'
import { callerResponseHeaders } from './forward-headers.ts'
import { roundedMs } from '../shared/run-result.ts'
import { envelopeJson } from './response-envelope.ts'
import type { ResponseSink, SinkContext } from '../shared/response-sink.ts'

/** Status, headers and body as the app sent them (hop-by-hop headers aside). */
export function passthroughSink (ctx: SinkContext, status: number, headers: IncomingHttpHeaders): ResponseSink {
  const { res, capture } = ctx
  res.writeHead(status, callerResponseHeaders(headers, ctx.runId))
  if (capture !== undefined) capture.status = status
  return {
    write: chunk => {
      capture?.body(chunk)
      return res.write(chunk)
    },
    end: () => { res.end() },
    fail: () => { res.destroy() },
    streaming: false
  }
}

/** Largest app body the cortex envelope will buffer; beyond it the call fails with 502. */
const MAX_ENVELOPE_BYTES = 256 * 1024 * 1024

/** The cortex runtime's 2xx answer: the whole body, wrapped as `{run_id, result, run_time_ms, timestamp}`. */
export function envelopeSink (ctx: SinkContext, status: number, headers: IncomingHttpHeaders): ResponseSink {
  const chunks: Buffer[] = []
  let size = 0
  let failed = false
  const { capture } = ctx
  if (capture !== undefined) capture.status = status
  return {
    streaming: false,
    write: chunk => {
      capture?.body(chunk)
      size += chunk.length
      if (size > MAX_ENVELOPE_BYTES) {
        if (!failed) ctx.answer(new AppUnreachableError('response too large to wrap'))
        failed = true
        return true
      }
      chunks.push(chunk)
      return true
    },
    end: () => {
      if (failed) return
      const runTimeMs = roundedMs(performance.now() - ctx.forwardedAt)
      const body = envelopeJson(ctx.runId, chunks.length === 1 ? chunks[0] as Buffer : Buffer.concat(chunks), runTimeMs, new Date().toISOString())
      const out = callerResponseHeaders(headers, ctx.runId, true)
      out['content-type'] = 'application/json; charset=utf-8'
      out['content-length'] = Buffer.byteLength(body)
      ctx.res.writeHead(status, out)
      ctx.res.end(body)
    },
    fail: error => {
      ctx.answer(error instanceof SidecarError ? error : new AppUnreachableError(describeNetworkError(error)))
    }
  }
}
