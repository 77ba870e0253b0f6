import type { IncomingHttpHeaders, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import { AppUnreachableError, SidecarError } from '../errors.ts'
import { sendError } from './error-response.ts'
import { describeNetworkError } from './network-error.ts'
import { callerResponseHeaders } from './forward-headers.ts'
import { envelopeJson, roundedMs } from './response-envelope.ts'
import type { WebhookTee } from '../webhook/webhook-tee.ts'

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

/** What a sink needs to know of the call it answers. */
export interface SinkContext {
  readonly res: ServerResponse
  readonly runId: string
  /** When the request was forwarded (performance.now()). */
  readonly forwardedAt: number
  /** The call's webhook, when it asked for one: sinks feed it what the caller gets. */
  readonly tee: WebhookTee | undefined
}

/** Status, headers and body as the app sent them (hop-by-hop headers aside). */
export function passthroughSink (ctx: SinkContext, status: number, headers: IncomingHttpHeaders): ResponseSink {
  const { res, tee } = ctx
  res.writeHead(status, callerResponseHeaders(headers, ctx.runId))
  if (tee !== undefined) tee.capture.status = status
  return {
    write: chunk => {
      tee?.capture.body(chunk)
      return res.write(chunk)
    },
    end: () => { res.end() },
    fail: () => { res.destroy() },
    streaming: false
  }
}

/** Largest app body the cortex envelope will buffer; beyond it the call fails with 502. */
export const MAX_ENVELOPE_BYTES = 256 * 1024 * 1024

/** The cortex runtime's 2xx answer: the whole body, wrapped as `{run_id, result, run_time_ms, timestamp}`. */
export function envelopeSink (ctx: SinkContext, status: number, headers: IncomingHttpHeaders): ResponseSink {
  const chunks: Buffer[] = []
  let size = 0
  let failed = false
  const { tee } = ctx
  if (tee !== undefined) tee.capture.status = status
  return {
    streaming: false,
    write: chunk => {
      tee?.capture.body(chunk)
      size += chunk.length
      if (size > MAX_ENVELOPE_BYTES) {
        if (!failed) sendError(ctx.res, ctx.runId, new AppUnreachableError('response too large to wrap'))
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
      sendError(ctx.res, ctx.runId, error instanceof SidecarError ? error : new AppUnreachableError(describeNetworkError(error)))
    }
  }
}
