import { readBearerToken } from '../auth/bearer-token.ts'
import type { TokenVerifier } from '../auth/token-verifier.ts'
import type { CallRecord } from './call-record.ts'

/**
 * The auth stage (401, 403): the bearer token (header, else `access_token` when allowed) must be
 * valid for the route's project; its `sub` becomes the call's `caller`. Undefined when it was
 * settled at once (auth off, or a cached token).
 */
export function authorizeCall (call: CallRecord, verifier: TokenVerifier | undefined): Promise<void> | undefined {
  if (verifier === undefined) return undefined
  const route = call.route
  return verifier.authorize(readBearerToken(call.req.headers, route.accessToken), route.projectId, call)
}
