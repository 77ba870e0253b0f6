import type { IncomingMessage } from 'node:http'
import { Readable } from 'node:stream'
import { BodyTooLargeError, MalformedRequestError } from '../errors.ts'
import { limitedBody } from '../shared/body-limit.ts'

/** Bodies up to this size are read whole before forwarding: one write to the app instead of a stream pipe. */
const SMALL_BODY_BYTES = 64 * 1024

export type RequestBody = Buffer | Readable | null

/**
 * The body to send to the app: a `Content-Length` over `maxBytes` is 413 before the app is called;
 * a small one is read whole (it usually arrived with the headers); a larger one streams, never
 * buffered whole; a chunked one streams through a counter that cuts it with 413 past the limit.
 */
export function readRequestBody (call: { readonly req: IncomingMessage }, maxBytes: number): RequestBody | Promise<RequestBody> {
  const req = call.req
  const length = req.headers['content-length']
  if (length !== undefined) {
    const bytes = Number(length)
    if (!/^\d+$/.test(length)) throw new MalformedRequestError('invalid Content-Length')
    if (bytes > maxBytes) throw new BodyTooLargeError(maxBytes)
    if (bytes === 0) return null
    return bytes <= SMALL_BODY_BYTES ? readWhole(req, bytes) : req
  }
  if (req.headers['transfer-encoding'] !== undefined) return Readable.from(limitedBody(req, maxBytes, () => new BodyTooLargeError(maxBytes)), { objectMode: false })
  return null
}

function readWhole (req: IncomingMessage, bytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const body = Buffer.allocUnsafe(bytes)
    let filled = 0
    req.on('data', (chunk: Buffer) => {
      chunk.copy(body, filled)
      filled += chunk.length
    })
    req.once('end', () => { resolve(filled === bytes ? body : body.subarray(0, filled)) })
    req.once('error', reject)
  })
}

/** The body read whole (a kept async run, an Idempotency-Key's digest); the request stage has already bounded it. */
export async function wholeRequestBody (body: RequestBody): Promise<Buffer | null> {
  if (body === null || Buffer.isBuffer(body)) return body
  const chunks: Buffer[] = []
  for await (const chunk of body) chunks.push(chunk as Buffer)
  return chunks.length === 0 ? null : Buffer.concat(chunks)
}
