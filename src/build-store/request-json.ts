import type { IncomingMessage } from 'node:http'
import { InvalidBodyError, StoreBodyTooLargeError } from '../errors.ts'
import { limitedBody } from '../shared/body-limit.ts'

/** Largest JSON body the store reads; a build record is a few kilobytes. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024

/** Deepest nesting of objects and arrays a body may have (the body itself is level 1). */
const MAX_JSON_DEPTH = 64

/**
 * Reads and parses a JSON request body. A `Content-Length` over `maxBytes` is refused before a
 * byte is read; a chunked body is refused as soon as it passes the limit. A body nested deeper
 * than `MAX_JSON_DEPTH` is refused too.
 */
export async function readJsonBody (req: IncomingMessage, maxBytes = MAX_JSON_BODY_BYTES): Promise<unknown> {
  const length = req.headers['content-length']
  if (length !== undefined && Number(length) > maxBytes) throw new StoreBodyTooLargeError(maxBytes)
  const chunks: Buffer[] = []
  for await (const chunk of limitedBody(req, maxBytes, () => new StoreBodyTooLargeError(maxBytes))) chunks.push(chunk)
  const text = Buffer.concat(chunks).toString('utf8')
  if (text.trim() === '') throw new InvalidBodyError('invalid JSON: the body is empty')
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    throw new InvalidBodyError(`invalid JSON: ${(error as Error).message}`)
  }
  // JSON.parse copes with any depth, but JSON.stringify (to store and to send the build) recurses: a deep body was a 500
  if (nestsDeeperThan(text, MAX_JSON_DEPTH)) throw new InvalidBodyError(`request body nests too deeply (limit ${MAX_JSON_DEPTH} levels)`)
  return value
}

/** Whether valid JSON `text` opens more than `limit` objects/arrays inside one another; a scan, no recursion. */
function nestsDeeperThan (text: string, limit: number): boolean {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // a backslash: the next character is escaped, even a quote
      else if (c === 0x22) inString = false
    } else if (c === 0x22) {
      inString = true
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > limit) return true
    } else if (c === 0x7d || c === 0x5d) {
      depth--
    }
  }
  return false
}
