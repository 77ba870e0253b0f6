import { hash } from 'node:crypto'
import { MalformedRequestError } from '../errors.ts'
import type { RunScope } from './store/run-store.ts'

// SPEC, Runs → Idempotency: `Idempotency-Key: <1 to 255 visible ASCII characters>` on a POST,
// per project, app and path; a repeat is compared with the first by a digest of its body.

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

/** What a repeat's body is compared by: SHA-256 of its bytes (base64url). The body itself is never kept. */
export function bodyDigest (body: Buffer | null): string {
  return hash('sha256', body ?? EMPTY, 'base64url')
}

/**
 * The name of a key's slot in the store: one per project, app, path and key, of fixed length
 * (SHA-256 of path and key, base64url), so a key of any length or content makes a safe store key.
 */
export function idempotencySlot (scope: RunScope, path: string, key: string): string {
  return hash('sha256', `${scope.projectId}\n${scope.appName}\n${path}\n${key}`, 'base64url')
}

const EMPTY = Buffer.alloc(0)
