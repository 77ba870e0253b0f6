import type { IncomingHttpHeaders, IncomingMessage, OutgoingHttpHeaders } from 'node:http'
import type { TLSSocket } from 'node:tls'
import { withServerTiming } from '../shared/server-timing.ts'
import type { TraceContext } from '../shared/trace-contracts.ts'
import { varyWithOrigin } from './cors.ts'

/** Hop-by-hop headers (RFC 9110 §7.6.1) and the ones the sidecar sets or consumes itself. */
const ALWAYS_DROPPED = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer',
  'transfer-encoding', 'upgrade', 'host', 'expect', 'http2-settings',
  'x-webhook-secret', 'x-request-id', 'x-forwarded-for', 'x-forwarded-proto', 'x-forwarded-host'
])

const RESPONSE_DROPPED = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'te', 'trailer',
  'transfer-encoding', 'upgrade', 'x-request-id'
])

export interface RequestHeaderRules {
  /** The sidecar checked `Authorization`, so it must not reach the app. */
  readonly dropAuthorization: boolean
  /** Ask the app for an unencoded body (the cortex envelope needs to read it). */
  readonly dropAcceptEncoding: boolean
  /** A WebSocket handshake: keep `Connection: Upgrade` and `Upgrade`. */
  readonly upgrade: boolean
}

/**
 * The headers sent to the app, as a flat [name, value, …] list: the caller's end-to-end headers
 * in their order, then `X-Forwarded-For/-Proto/-Host` and `X-Request-Id`; with `trace` (tracing
 * on), the caller's `traceparent`/`tracestate` give way to the sidecar span's.
 */
export function appRequestHeaders (req: IncomingMessage, runId: string, rules: RequestHeaderRules, trace?: TraceContext): string[] {
  const raw = req.rawHeaders
  const named = connectionTokens(req.headers.connection)
  const out: string[] = []
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i] as string
    const lower = name.toLowerCase()
    if (ALWAYS_DROPPED.has(lower) || (named !== undefined && named.has(lower))) continue
    if (rules.dropAuthorization && lower === 'authorization') continue
    if (rules.dropAcceptEncoding && lower === 'accept-encoding') continue
    if (trace !== undefined && TRACE_CONTEXT.has(lower)) continue
    out.push(name, raw[i + 1] as string)
  }
  if (trace !== undefined) pushTraceContext(out, trace)
  if (rules.upgrade) out.push('connection', 'Upgrade', 'upgrade', String(req.headers.upgrade))
  const callerAddress = req.socket.remoteAddress ?? ''
  const priorFor = req.headers['x-forwarded-for']
  out.push(
    'x-forwarded-for', priorFor === undefined || priorFor === '' ? callerAddress : `${priorFor}, ${callerAddress}`,
    'x-forwarded-proto', (req.socket as TLSSocket).encrypted === true ? 'https' : 'http',
    'x-request-id', runId
  )
  if (req.headers.host !== undefined) out.push('x-forwarded-host', req.headers.host)
  return out
}

/** The W3C trace context headers. */
const TRACE_CONTEXT = new Set(['traceparent', 'tracestate'])

/** Appends `trace` to a flat header list: its `traceparent`, and its `tracestate` when it has one. */
function pushTraceContext (out: string[], trace: TraceContext): void {
  out.push('traceparent', trace.traceparent)
  if (trace.tracestate !== undefined && trace.tracestate !== '') out.push('tracestate', trace.tracestate)
}

/** A copy of a flat header list (a stored request's), carrying `trace` instead of the context it had, when given. */
export function withTraceContext (headers: readonly string[], trace: TraceContext | undefined): string[] {
  if (trace === undefined) return [...headers]
  const out: string[] = []
  for (let i = 0; i < headers.length; i += 2) {
    if (!TRACE_CONTEXT.has((headers[i] as string).toLowerCase())) out.push(headers[i] as string, headers[i + 1] as string)
  }
  pushTraceContext(out, trace)
  return out
}

/** The same headers as an object (for the WebSocket handshake, which http-proxy sends from one). */
export function headerListToObject (list: string[]): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = {}
  for (let i = 0; i < list.length; i += 2) {
    const name = (list[i] as string).toLowerCase()
    const value = list[i + 1] as string
    const prior = headers[name]
    headers[name] = prior === undefined ? value : `${String(prior)}, ${value}`
  }
  return headers
}

/** Headers that describe the app's body, not the cortex envelope that replaces it. */
const BODY_DESCRIBING = new Set(['content-type', 'content-length', 'content-encoding', 'etag', 'content-md5', 'digest'])

/**
 * The app's response headers minus hop-by-hop ones, with the run id set and the sidecar's
 * `timing` after the app's own Server-Timing entries (less any it names `queue` or `app`); `forEnvelope` also drops the ones that
 * describe the app's body (the caller gets the envelope instead). With `corsOwned`
 * (CORS_ALLOWED_ORIGINS set) the sidecar answers CORS: the app's `Access-Control-*` headers are
 * dropped (the call's own are already on the response), and its `Vary` keeps `Origin`.
 */
export function callerResponseHeaders (appHeaders: IncomingHttpHeaders, runId: string, timing: string, forEnvelope = false, corsOwned = false): OutgoingHttpHeaders {
  const named = connectionTokens(appHeaders.connection)
  const out: OutgoingHttpHeaders = {}
  for (const name in appHeaders) {
    if (RESPONSE_DROPPED.has(name) || (named !== undefined && named.has(name)) ||
        (forEnvelope && BODY_DESCRIBING.has(name)) || (corsOwned && name.startsWith('access-control-'))) continue
    out[name] = appHeaders[name]
  }
  out['x-request-id'] = runId
  out['server-timing'] = withServerTiming(out['server-timing'] as string | string[] | undefined, timing)
  if (corsOwned && out.vary !== undefined) out.vary = varyWithOrigin(out.vary)
  return out
}

function connectionTokens (connection: string | string[] | undefined): Set<string> | undefined {
  if (connection === undefined) return undefined
  const text = Array.isArray(connection) ? connection.join(',') : connection
  const lower = text.toLowerCase()
  if (lower === 'keep-alive' || lower === 'close' || lower === 'upgrade') return undefined
  return new Set(lower.split(',').map(token => token.trim()).filter(token => token !== ''))
}
