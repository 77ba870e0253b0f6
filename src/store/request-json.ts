import type { IncomingMessage } from 'node:http'
import { InvalidBodyError, StoreBodyTooLargeError } from '../errors.ts'

/** Largest JSON body the store reads; a build record is a few kilobytes. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024

/**
 * Reads and parses a JSON request body. A `Content-Length` over `maxBytes` is refused before a
 * byte is read; a chunked body is refused as soon as it passes the limit.
 */
export async function readJsonBody (req: IncomingMessage, maxBytes = MAX_JSON_BODY_BYTES): Promise<unknown> {
  const length = req.headers['content-length']
  if (length !== undefined && Number(length) > maxBytes) throw new StoreBodyTooLargeError(maxBytes)
  const chunks: Buffer[] = []
  let seen = 0
  for await (const chunk of req) {
    seen += (chunk as Buffer).length
    if (seen > maxBytes) throw new StoreBodyTooLargeError(maxBytes)
    chunks.push(chunk as Buffer)
  }
  const text = Buffer.concat(chunks).toString('utf8')
  if (text.trim() === '') throw new InvalidBodyError('invalid JSON: the body is empty')
  try {
    return JSON.parse(text) as unknown
  } catch (error) {
    throw new InvalidBodyError(`invalid JSON: ${(error as Error).message}`)
  }
}
