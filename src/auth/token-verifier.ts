import type { JSONWebKeySet, JWTVerifyGetKey } from 'jose'
import type * as JoseErrors from 'jose/errors'
import type { createLocalJWKSet } from 'jose/jwks/local'
import type { jwtVerify } from 'jose/jwt/verify'
import { LRUCache } from 'lru-cache'
import { ForbiddenProjectError, InvalidTokenError, type SidecarError, StoreUnreachableError, TokenKeysUnreachableError } from '../errors.ts'
import { fetchBoundedJson } from './bounded-json.ts'

/** The parts of jose the verifier uses. */
interface Jose {
  readonly jwtVerify: typeof jwtVerify
  readonly createLocalJWKSet: typeof createLocalJWKSet
  readonly errors: typeof JoseErrors
}
/** jose once loaded: every use comes after a loadJose() (a verification, a key set made). */
let jose: Jose | undefined
let joseLoading: Promise<Jose> | undefined

/**
 * jose, imported on first use: its modules take ~15 ms to load, which start-up need not wait for
 * (the key set is fetched, and jose loaded with it, once the listeners are up). Its subpaths, not
 * its index: the index loads every JWE, JWK and signing module too (~2 MB of an idle sidecar).
 */
async function loadJose (): Promise<Jose> {
  joseLoading ??= Promise.all([import('jose/jwt/verify'), import('jose/jwks/local'), import('jose/errors')])
    .then(([verify, local, errors]) => (jose = { jwtVerify: verify.jwtVerify, createLocalJWKSet: local.createLocalJWKSet, errors }))
  return await joseLoading
}

/** What the sidecar keeps of a token it has verified. */
export interface VerifiedToken {
  readonly projectId: string | undefined
  /** Its `sub`: the caller it names ('' for a token without one, so all such tokens are one caller). */
  readonly subject: string
  readonly jti: string | undefined
  /** Expiry in epoch milliseconds (`exp` is required). */
  readonly expiresAtMs: number
}

export interface TokenVerifierOptions {
  jwksUrl: URL
  /** The key set is not the build store's (AUTH_JWKS_URL points elsewhere): its failures name AUTH_JWKS_URL, not the store. */
  keysElsewhere?: boolean
  /** Most verified tokens kept; the least recently used is dropped beyond it. */
  cacheSize?: number
  /** Shortest time between two JWKS fetches caused by an unknown `kid`. */
  refetchCooldownMs?: number
  /** After a failed JWKS fetch, no new fetch for this long: calls in between are refused at once (502). */
  retryAfterFailureMs?: number
  /** Override of the key source (tests); by default the remote JWKS at `jwksUrl`. */
  keys?: JWTVerifyGetKey
  /** Token ids revoked at the store; a revoked token is refused even when cached. */
  revoked?: { has: (jti: string | undefined) => boolean }
}

/** Who learns the caller a verified token names (a call, whose Idempotency-Keys are scoped to it). */
export interface TokenCaller {
  caller: string
}

/** Asymmetric algorithms only: `none` and HMAC are refused whatever a token's header says. */
export const ACCEPTED_ALGORITHMS = ['EdDSA', 'ES256', 'RS256']

/** Largest JWKS response read: a key set is a few keys of under 1 KiB each; more is refused unbuffered. */
export const JWKS_MAX_BYTES = 1024 * 1024

/**
 * Verifies bearer tokens (JWTs) against the build store's JWKS and remembers the ones it has
 * verified until they expire, so the hot path checks a signature once per token, not per request.
 */
export class TokenVerifier {
  readonly #keys: JWTVerifyGetKey
  readonly #cache: LRUCache<string, VerifiedToken>
  readonly #keySet: RemoteKeys | undefined
  #loading: NodeJS.Timeout | undefined
  readonly #revoked: { has: (jti: string | undefined) => boolean }
  readonly #keysElsewhere: boolean

  constructor (options: TokenVerifierOptions) {
    this.#keysElsewhere = options.keysElsewhere === true
    this.#cache = new LRUCache({ max: options.cacheSize ?? 10_000 })
    this.#revoked = options.revoked ?? { has: () => false }
    if (options.keys !== undefined) {
      this.#keys = options.keys
      this.#keySet = undefined
    } else {
      this.#keySet = remoteKeys(options.jwksUrl, {
        refetchCooldownMs: options.refetchCooldownMs ?? 30_000,
        retryAfterFailureMs: options.retryAfterFailureMs ?? 5_000
      })
      this.#keys = this.#keySet.getKey
    }
  }

  /** Why no token can be verified yet (no key set was ever fetched), or undefined once one was. */
  get keysMissing (): string | undefined {
    return this.#keySet === undefined || this.#keySet.loaded() ? undefined : this.#keySet.lastFailure() ?? 'not fetched yet'
  }

  /** Fetches the key set now, then again every `retryMs` until one arrives (so readiness need not wait for a caller). */
  loadKeys (retryMs: number): void {
    const keySet = this.#keySet
    if (keySet === undefined || this.#loading !== undefined) return
    const attempt = (): void => {
      this.#loading = undefined
      if (keySet.loaded()) return
      keySet.load().catch(() => { this.#loading = setTimeout(attempt, retryMs).unref() })
    }
    attempt()
  }

  /** Stops retrying loadKeys(). */
  stop (): void { clearTimeout(this.#loading) }

  /**
   * Resolves when `token` is valid for `projectId` (then `to.caller` is its `sub`); rejects with the
   * SidecarError to answer. Returns synchronously (undefined) when the token is cached, sparing a
   * promise per request.
   */
  authorize (token: string, projectId: string, to?: TokenCaller): Promise<void> | undefined {
    const cached = this.#cache.get(token)
    if (cached !== undefined && cached.expiresAtMs > Date.now()) {
      if (this.#revoked.has(cached.jti)) throw new InvalidTokenError('revoked')
      if (cached.projectId !== projectId) throw new ForbiddenProjectError()
      if (to !== undefined) to.caller = cached.subject
      return undefined
    }
    if (cached !== undefined) this.#cache.delete(token)
    return this.#verify(token).then(verified => {
      if (this.#revoked.has(verified.jti)) throw new InvalidTokenError('revoked')
      if (verified.projectId !== projectId) throw new ForbiddenProjectError()
      if (to !== undefined) to.caller = verified.subject
    })
  }

  async #verify (token: string): Promise<VerifiedToken> {
    const { jwtVerify, errors } = jose ?? await loadJose()
    let payload
    try {
      ({ payload } = await jwtVerify(token, this.#keys, { algorithms: ACCEPTED_ALGORITHMS, requiredClaims: ['exp'] }))
    } catch (error) {
      throw tokenError(errors, error, this.#keysElsewhere)
    }
    const verified: VerifiedToken = {
      projectId: typeof payload.projectId === 'string' ? payload.projectId : undefined,
      subject: typeof payload.sub === 'string' ? payload.sub : '',
      jti: payload.jti,
      expiresAtMs: (payload.exp as number) * 1000
    }
    this.#cache.set(token, verified)
    return verified
  }

  /** Tokens currently remembered (for tests and metrics). */
  get cachedTokens (): number { return this.#cache.size }
}

/** The key set could not be fetched (or, backing off after a failure, was not tried): a 502. */
class KeySetUnavailableError extends Error {}

/** The store's key set as the verifier uses it. */
interface RemoteKeys {
  readonly getKey: JWTVerifyGetKey
  /** A key set was fetched at least once. */
  loaded: () => boolean
  /** Why the last fetch failed, while the latest one did. */
  lastFailure: () => string | undefined
  /** Fetches now (or joins the fetch under way); rejects when it fails or is backing off. */
  load: () => Promise<void>
}

const KEYS_MAX_AGE_MS = 10 * 60_000
const JWKS_TIMEOUT_MS = 5_000

/**
 * The remote JWKS: fetched on first use and when older than 10 min, refetched when a token names
 * an unknown `kid` at most once per `refetchCooldownMs` (only such refetches count, so a key rotated
 * just after the first fetch is still picked up). One fetch at a time, its outcome shared by every
 * caller waiting; after a failure nothing is fetched for `retryAfterFailureMs`, so forged tokens
 * cannot turn a struggling store into a retry storm.
 */
function remoteKeys (url: URL, timing: { refetchCooldownMs: number, retryAfterFailureMs: number }): RemoteKeys {
  let keys: JWTVerifyGetKey | undefined
  let fetchedAt = -Infinity
  let failedAt = -Infinity
  let failure: string | undefined
  let lastRefetch = -Infinity
  let fetching: Promise<JWTVerifyGetKey> | undefined

  /** The fetch in flight, or a new one; throws at once while backing off after a failure. */
  const fetchKeys = (): Promise<JWTVerifyGetKey> => {
    if (fetching !== undefined) return fetching
    if (Date.now() < failedAt + timing.retryAfterFailureMs) throw new KeySetUnavailableError(`${failure as string}; backing off`)
    fetching = fetchBoundedJson(url, { maxBytes: JWKS_MAX_BYTES, timeoutMs: JWKS_TIMEOUT_MS })
      .then(async json => (jose ?? await loadJose()).createLocalJWKSet(json as JSONWebKeySet))
      .then(loaded => {
        keys = loaded
        fetchedAt = Date.now()
        failure = undefined
        return loaded
      }, (error: unknown) => {
        failedAt = Date.now()
        const err = error as NodeJS.ErrnoException
        // the reason names the URL, never a secret (the JWKS URL carries none)
        failure = `JWKS fetch failed: ${err.message.includes(url.href) ? err.message : `${url.href}: ${err.code ?? err.message}`}`
        throw new KeySetUnavailableError(failure, { cause: error })
      })
      .finally(() => { fetching = undefined })
    return fetching
  }

  const getKey: JWTVerifyGetKey = async (header, token) => {
    const fetchesNow = keys === undefined || Date.now() >= fetchedAt + KEYS_MAX_AGE_MS // this very call (re)loads them
    const current = fetchesNow ? await fetchKeys() : keys as JWTVerifyGetKey
    try {
      return await current(header, token)
    } catch (error) {
      // jose is loaded: the key set `current` was made by it
      if (!(error instanceof (jose as Jose).errors.JWKSNoMatchingKey) || fetchesNow) throw error
      let refetch = fetching // a fetch already under way is joined, whatever started it
      if (refetch === undefined) {
        if (Date.now() < lastRefetch + timing.refetchCooldownMs) throw error
        refetch = fetchKeys() // throws at once while backing off, before the cooldown is spent
        lastRefetch = Date.now()
      }
      return await (await refetch)(header, token)
    }
  }
  return {
    getKey,
    loaded: () => keys !== undefined,
    lastFailure: () => failure,
    load: async () => { await fetchKeys() }
  }
}

function tokenError (joseErrors: typeof JoseErrors, error: unknown, keysElsewhere: boolean): SidecarError {
  if (error instanceof joseErrors.JWTExpired) return new InvalidTokenError('expired')
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return new InvalidTokenError('bad signature')
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return new InvalidTokenError('algorithm not allowed')
  if (error instanceof joseErrors.JWKSNoMatchingKey) return new InvalidTokenError('unknown signing key')
  if (error instanceof joseErrors.JWTClaimValidationFailed) return new InvalidTokenError(`claim ${error.claim} rejected`)
  // KeySetUnavailableError, or whatever a key source given as `keys` throws that is not about the token
  if (error instanceof Error && !(error instanceof joseErrors.JOSEError)) {
    return keysElsewhere ? new TokenKeysUnreachableError(error.message) : new StoreUnreachableError('token keys could not be fetched', error.message)
  }
  return new InvalidTokenError('malformed')
}
