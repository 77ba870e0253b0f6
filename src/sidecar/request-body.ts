import type { IncomingMessage } from 'node:http'
import { Readable } from 'node:stream'
import { BodyTooLargeError, MalformedRequestError } from '../errors.ts'

/**
 * The body to stream to the app, never buffered whole: the request itself when its
 * `Content-Length` is within `maxBytes` (413 before the app is called when it is not),
 * a counting stream for a chunked body (cut with 413 once it passes the limit), or null.
 */
export function requestBodyFor (req: IncomingMessage, maxBytes: number): Readable | null {
  const length = req.headers['content-length']
  if (length !== undefined) {
    const bytes = Number(length)
    if (!/^\d+$/.test(length)) throw new MalformedRequestError('invalid Content-Length')
    if (bytes > maxBytes) throw new BodyTooLargeError(maxBytes)
    return bytes === 0 ? null : req
  }
  if (req.headers['transfer-encoding'] !== undefined) return Readable.from(countedBody(req, maxBytes), { objectMode: false })
  return null
}

async function * countedBody (req: IncomingMessage, maxBytes: number): AsyncIterable<Buffer> {
  let seen = 0
  for await (const chunk of req) {
    seen += (chunk as Buffer).length
    if (seen > maxBytes) throw new BodyTooLargeError(maxBytes)
    yield chunk as Buffer
  }
}
