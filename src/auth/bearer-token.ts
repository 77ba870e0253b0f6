import type { IncomingHttpHeaders } from 'node:http'
import { MissingTokenError, InvalidTokenError } from '../errors.ts'

const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i

/**
 * The token a caller sent: the `Authorization: Bearer` header wins; else the `access_token`
 * query value when the sidecar allows it. Throws 401 errors for a missing or malformed one.
 */
export function readBearerToken (headers: IncomingHttpHeaders, queryToken: string | undefined): string {
  const header = headers.authorization
  if (header !== undefined) {
    const match = BEARER.exec(header)
    if (match === null) throw new InvalidTokenError('Authorization must be "Bearer <token>"')
    return match[1] as string
  }
  if (queryToken !== undefined && queryToken !== '') return queryToken
  throw new MissingTokenError()
}
