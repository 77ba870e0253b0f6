import { createRemoteJWKSet, errors as joseErrors, jwtVerify, type JWTVerifyGetKey } from 'jose'
import { ForbiddenProjectError, InvalidTokenError, SidecarError, StoreUnreachableError } from '../errors.ts'

/** What the sidecar keeps of a token it has verified. */
export interface VerifiedToken {
  readonly projectId: string | undefined
  readonly jti: string | undefined
  /** Expiry in epoch milliseconds (`exp` is required). */
  readonly expiresAtMs: number
}

export interface TokenVerifierOptions {
  jwksUrl: URL
  /** Most verified tokens kept; the oldest is dropped beyond it. */
  cacheSize?: number
  /** Shortest time between two JWKS fetches caused by an unknown `kid`. */
  refetchCooldownMs?: number
  /** Override of the key source (tests); by default the remote JWKS at `jwksUrl`. */
  keys?: JWTVerifyGetKey
  /** Token ids revoked at the store; a revoked token is refused even when cached. */
  revoked?: { has: (jti: string | undefined) => boolean }
}

/** Asymmetric algorithms only: `none` and HMAC are refused whatever a token's header says. */
export const ACCEPTED_ALGORITHMS = ['EdDSA', 'ES256', 'RS256']

/**
 * Verifies bearer tokens (JWTs) against the build store's JWKS and remembers the ones it has
 * verified until they expire, so the hot path checks a signature once per token, not per request.
 */
export class TokenVerifier {
  readonly #keys: JWTVerifyGetKey
  readonly #cache = new Map<string, VerifiedToken>()
  readonly #cacheSize: number
  readonly #revoked: { has: (jti: string | undefined) => boolean }

  constructor (options: TokenVerifierOptions) {
    this.#cacheSize = options.cacheSize ?? 10_000
    this.#revoked = options.revoked ?? { has: () => false }
    this.#keys = options.keys ?? remoteKeys(options.jwksUrl, options.refetchCooldownMs ?? 30_000)
  }

  /**
   * Resolves when `token` is valid for `projectId`; rejects with the SidecarError to answer.
   * Returns synchronously (undefined) when the token is cached, sparing a promise per request.
   */
  authorize (token: string, projectId: string): Promise<void> | undefined {
    const cached = this.#cache.get(token)
    if (cached !== undefined && cached.expiresAtMs > Date.now()) {
      if (this.#revoked.has(cached.jti)) throw new InvalidTokenError('revoked')
      if (cached.projectId !== projectId) throw new ForbiddenProjectError()
      return undefined
    }
    if (cached !== undefined) this.#cache.delete(token)
    return this.#verify(token).then(verified => {
      if (this.#revoked.has(verified.jti)) throw new InvalidTokenError('revoked')
      if (verified.projectId !== projectId) throw new ForbiddenProjectError()
    })
  }

  async #verify (token: string): Promise<VerifiedToken> {
    let payload
    try {
      ({ payload } = await jwtVerify(token, this.#keys, { algorithms: ACCEPTED_ALGORITHMS, requiredClaims: ['exp'] }))
    } catch (error) {
      throw tokenError(error)
    }
    const verified: VerifiedToken = {
      projectId: typeof payload.projectId === 'string' ? payload.projectId : undefined,
      jti: payload.jti,
      expiresAtMs: (payload.exp as number) * 1000
    }
    if (this.#cache.size >= this.#cacheSize) {
      const oldest = this.#cache.keys().next().value
      if (oldest !== undefined) this.#cache.delete(oldest)
    }
    this.#cache.set(token, verified)
    return verified
  }

  /** Tokens currently remembered (for tests and metrics). */
  get cachedTokens (): number { return this.#cache.size }
}

/**
 * The remote JWKS, refetched when a token names an unknown `kid`, at most once per `cooldownMs`.
 * jose's own cooldown counts from any fetch (the first one, the periodic refresh), which would
 * refuse a key rotated shortly after one; here only refetches caused by an unknown `kid` count.
 */
function remoteKeys (url: URL, cooldownMs: number): JWTVerifyGetKey {
  const remote = createRemoteJWKSet(url, { cooldownDuration: Infinity, cacheMaxAge: 10 * 60_000, timeoutDuration: 5_000 })
  let lastRefetch = -Infinity
  let refetching: Promise<void> | undefined // shared by the concurrent calls that asked for it
  return async (header, token) => {
    const fetchesNow = !remote.fresh // no keys yet, or stale: this very call fetches them
    try {
      return await remote(header, token)
    } catch (error) {
      if (!(error instanceof joseErrors.JWKSNoMatchingKey) || fetchesNow) throw error
      if (refetching === undefined) {
        if (Date.now() < lastRefetch + cooldownMs) throw error
        lastRefetch = Date.now()
        refetching = remote.reload().finally(() => { refetching = undefined })
      }
      await refetching
      return await remote(header, token)
    }
  }
}

function tokenError (error: unknown): SidecarError {
  if (error instanceof joseErrors.JWTExpired) return new InvalidTokenError('expired')
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return new InvalidTokenError('bad signature')
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return new InvalidTokenError('algorithm not allowed')
  if (error instanceof joseErrors.JWKSNoMatchingKey) return new InvalidTokenError('unknown signing key')
  if (error instanceof joseErrors.JWTClaimValidationFailed) return new InvalidTokenError(`claim ${error.claim} rejected`)
  // a bare JOSEError (ERR_JOSE_GENERIC) is jose's "non-200 or non-JSON JWKS response"
  if (error instanceof joseErrors.JWKSTimeout || error instanceof joseErrors.JWKSInvalid ||
      (error instanceof joseErrors.JOSEError && error.code === 'ERR_JOSE_GENERIC') ||
      (error instanceof Error && !(error instanceof joseErrors.JOSEError))) {
    return new StoreUnreachableError('token keys could not be fetched')
  }
  return new InvalidTokenError('malformed')
}
