import type { OutgoingHttpHeaders } from 'node:http'
import type { AllowedOrigins } from '../config/env-parsers.ts'
import { OriginNotAllowedError } from '../errors.ts'
import type { HttpCall } from './http-call.ts'

/** The response headers a page on another origin may read (docs/routes.md, "CORS: browser pages on other origins"). */
export const EXPOSED_HEADERS = 'X-Request-Id, Idempotent-Replayed, Server-Timing, Location, Retry-After, Preference-Applied'
/** The methods a preflight is told the sidecar takes. */
export const ALLOWED_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE'
/** How long a browser may keep a preflight's answer, in seconds. */
export const PREFLIGHT_MAX_AGE = '600'

/** What an Origin header holds: `null`, or scheme://host[:port], nothing else (with `*`, the sidecar echoes it). */
const ORIGIN_SHAPE = /^(null|[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s,/]+)$/
/** An HTTP field name (RFC 9110 token). */
const FIELD_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/

/**
 * The CORS stage (CORS_ALLOWED_ORIGINS set): a call whose `Origin` is allowed gets
 * `Access-Control-Allow-Origin`, `Vary: Origin` and `Access-Control-Expose-Headers` on whatever
 * answers it (the app's, or the sidecar's own errors: they are set on the response before any
 * stage runs); a preflight from an allowed origin is answered 204 here (no token, never the app),
 * one from any other origin 403. A call from an origin not allowed gets no CORS header.
 */
export class CorsPolicy {
  readonly #any: boolean
  readonly #origins: ReadonlySet<string>

  constructor (allowed: AllowedOrigins) {
    this.#any = allowed === '*'
    this.#origins = new Set(allowed === '*' ? [] : allowed)
  }

  allows (origin: string): boolean {
    return this.#any ? ORIGIN_SHAPE.test(origin) : this.#origins.has(origin)
  }

  /** True when the call was answered (a preflight); throws OriginNotAllowedError (403) for a preflight from an origin not allowed. */
  answer (call: HttpCall): boolean {
    const { req, out } = call
    const origin = req.headers.origin
    if (origin === undefined) return false
    // a preflight, as Fetch defines it: an OPTIONS with Origin and Access-Control-Request-Method
    const preflight = req.method === 'OPTIONS' && req.headers['access-control-request-method'] !== undefined
    if (!this.allows(origin)) {
      if (preflight) throw new OriginNotAllowedError()
      return false
    }
    out.setHeader('access-control-allow-origin', origin)
    out.setHeader('vary', 'Origin')
    out.setHeader('access-control-expose-headers', EXPOSED_HEADERS)
    if (!preflight || call.settled) return preflight
    const headers: OutgoingHttpHeaders = {
      'access-control-allow-methods': ALLOWED_METHODS,
      'access-control-max-age': PREFLIGHT_MAX_AGE,
      'x-request-id': call.runId
    }
    const asked = requestedHeaders(req.headers['access-control-request-headers'])
    if (asked !== '') headers['access-control-allow-headers'] = asked
    out.writeHead(204, headers).end()
    return true
  }
}

/** The header names a preflight asked for, as a list to answer with ('' for none). */
function requestedHeaders (value: string | undefined): string {
  if (value === undefined) return ''
  return value.split(',').map(name => name.trim().toLowerCase()).filter(name => FIELD_NAME.test(name)).join(', ')
}

/** An app's `Vary` with `Origin` added (unless it already names it, or `*`): the sidecar's CORS answers vary by it. */
export function varyWithOrigin (vary: string | string[]): string {
  const text = Array.isArray(vary) ? vary.join(', ') : vary
  const names = text.toLowerCase().split(',').map(name => name.trim())
  return names.includes('origin') || names.includes('*') ? text : `${text}, Origin`
}
