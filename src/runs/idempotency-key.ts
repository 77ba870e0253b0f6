import { createHash, hash } from 'node:crypto'
import { MalformedRequestError } from '../errors.ts'
import type { RunScope } from './run-data.ts'

// docs/runs.md, "Retrying safely: `Idempotency-Key`": `Idempotency-Key: <1 to 255 visible ASCII
// characters>` on a POST, per project, app, path and caller; a repeat is compared with the first
// by a digest of its query and body.

const VISIBLE_ASCII = /^[\x21-\x7e]{1,255}$/

/**
 * The request's Idempotency-Key, or undefined when it has none. 400 when it is not 1 to 255
 * visible ASCII characters; a key sent twice arrives joined by ", " and is refused too.
 */
export function idempotencyKey (header: string | string[] | undefined): string | undefined {
  if (header === undefined) return undefined
  if (typeof header !== 'string' || !VISIBLE_ASCII.test(header)) {
    throw new MalformedRequestError('malformed Idempotency-Key: 1 to 255 visible ASCII characters, sent once')
  }
  return header
}

/**
 * What a repeat is compared by: SHA-256 (base64url) of its query (without the parameters the
 * sidecar takes) and its body bytes, the query's length first so that no two pairs run together.
 * Neither is kept.
 */
export function requestDigest (query: string, body: Buffer | null): string {
  const digest = createHash('sha256').update(`${query.length}:${query}\n`)
  if (body !== null) digest.update(body)
  return digest.digest('base64url')
}

/**
 * The name of a key's slot in the store: one per project, app, path, caller (a token's `sub`) and
 * key, of fixed length (SHA-256, base64url), so a key or caller of any length or content makes a
 * safe store key.
 */
export function idempotencySlot (scope: RunScope, path: string, caller: string, key: string): string {
  return hash('sha256', JSON.stringify([scope.projectId, scope.appName, path, caller, key]), 'base64url')
}
