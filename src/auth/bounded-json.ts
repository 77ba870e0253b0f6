import { boundedGet } from '../shared/bounded-get.ts'

export interface BoundedJsonOptions {
  /** Largest body accepted; a larger one is refused without being buffered. */
  maxBytes: number
  /** Deadline for the whole exchange, headers and body (a store trickling bytes cannot hold it longer). */
  timeoutMs: number
}

/**
 * GETs `url` and parses its 200 body as JSON, holding at most `maxBytes` of it: a larger
 * Content-Length is refused before any body is read, and a body that grows past the cap is cut
 * off (its connection closed). Rejects on any other status, a timeout, a reset, or a body that
 * is not JSON.
 */
export async function fetchBoundedJson (url: URL, options: BoundedJsonOptions): Promise<unknown> {
  const response = await boundedGet(url, { ...options, headers: { accept: 'application/json' } })
  if (response.status !== 200) throw new Error(`${url.href} answered ${response.status}`)
  return JSON.parse(response.body.toString('utf8'))
}
