import type { IncomingHttpHeaders } from 'node:http'
import type { ResponseSink, SinkContext } from '../shared/response-sink.ts'
import type { StreamKind } from '../stream/event-splitter.ts'
import type { StreamSinks } from '../stream/stream-sinks.ts'
import { envelopeSink, passthroughSink } from './response-sinks.ts'

/** Picks the sink for an app response once its status and headers are known. */
export type SinkChooser = (ctx: SinkContext, status: number, headers: IncomingHttpHeaders) => ResponseSink

/**
 * The response table (docs/routes.md, "Response table"), row by row: an event stream,
 * NDJSON/JSONL, a chunked body for a caller that accepts SSE (the three stream rows, for 2xx
 * bodies the sidecar can read), then the runtime's rule: the cortex envelope, else everything as
 * the app sent it. `corsOwned` (CORS_ALLOWED_ORIGINS set): the app's own CORS headers give way
 * to the sidecar's.
 */
export function responseTable (streams: StreamSinks, runtime: 'cortex' | 'custom', envelopeMaxBytes: number, corsOwned = false): SinkChooser {
  return function chooseSink (ctx, status, headers) {
    const req = ctx.out.req
    if (!hasReadableBody(req.method, status, headers)) return passthroughSink(ctx, status, headers, corsOwned)
    const kind = streamKind(headers, req.headers.accept)
    if (kind === 'event-stream') return streams.eventStream(ctx)
    if (kind === 'ndjson') return streams.ndjson(ctx)
    if (kind === 'chunks') return streams.chunks(ctx)
    if (runtime === 'cortex') return envelopeSink(ctx, status, headers, envelopeMaxBytes, corsOwned)
    return passthroughSink(ctx, status, headers, corsOwned)
  }
}

/** A 2xx body the caller will get (not HEAD, 204, 205), not content-encoded. */
export function hasReadableBody (method: string | undefined, status: number, headers: IncomingHttpHeaders): boolean {
  return status >= 200 && status < 300 && status !== 204 && status !== 205 && method !== 'HEAD' &&
    (headers['content-encoding'] === undefined || headers['content-encoding'] === 'identity')
}

/** Which of the table's three stream rows a readable body falls under, if any (`accept`: the caller's Accept). */
export function streamKind (headers: IncomingHttpHeaders, accept: string | undefined): StreamKind | undefined {
  const type = mediaType(headers['content-type'])
  if (type === 'text/event-stream') return 'event-stream'
  if (type === 'application/x-ndjson' || type === 'application/jsonl') return 'ndjson'
  if (headers['content-length'] === undefined && acceptsEventStream(accept)) return 'chunks'
  return undefined
}

function mediaType (contentType: string | undefined): string {
  if (contentType === undefined) return ''
  const semicolon = contentType.indexOf(';')
  return (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase()
}

function acceptsEventStream (accept: string | undefined): boolean {
  return accept !== undefined && accept.toLowerCase().includes('text/event-stream')
}
