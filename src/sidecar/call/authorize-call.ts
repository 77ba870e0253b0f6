import type { IncomingHttpHeaders } from 'node:http'
import { readBearerToken } from '../../auth/bearer-token.ts'
import type { TokenVerifier } from '../../auth/token-verifier.ts'
import type { CallRoute } from './match-route.ts'

/**
 * The auth stage (401, 403): the bearer token (header, else `access_token` when allowed) must be
 * valid for the route's project. Undefined when it was settled at once (auth off, or a cached token).
 */
export function authorizeCall (verifier: TokenVerifier | undefined, headers: IncomingHttpHeaders, route: CallRoute): Promise<void> | undefined {
  if (verifier === undefined) return undefined
  return verifier.authorize(readBearerToken(headers, route.accessToken), route.projectId)
}
