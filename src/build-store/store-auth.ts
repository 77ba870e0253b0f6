import { createHash, timingSafeEqual } from 'node:crypto'
import { errors as joseErrors } from 'jose'
import { LRUCache } from 'lru-cache'
import {
  AdminTokenRequiredError, StoreForbiddenProjectError, StoreInvalidTokenError, StoreMissingTokenError
} from '../errors.ts'
import type { ServiceAccounts } from './service-accounts.ts'
import type { TokenSigner } from './token-signer.ts'

const BEARER = /^Bearer +([A-Za-z0-9\-._~+/]+=*) *$/i

/** What the store keeps of a service-account token it has verified. */
interface VerifiedToken {
  readonly projectId: string
  readonly jti: string
  /** Expiry in epoch milliseconds. */
  readonly expiresAtMs: number
}

export interface StoreAuthOptions {
  adminToken: string | undefined
  signer: TokenSigner
  serviceAccounts: ServiceAccounts
  /** Most verified tokens remembered; the least recently used is dropped beyond it. */
  cacheSize?: number
}

/**
 * Who may do what: the admin token for writes and lists; for Get Build, the admin token or a
 * service-account token of that project. A token's signature is checked once, then remembered
 * until its `exp`; expiry and revocation are checked on every request.
 */
export class StoreAuth {
  readonly #adminDigest: Buffer | undefined
  readonly #signer: TokenSigner
  readonly #serviceAccounts: ServiceAccounts
  readonly #cache: LRUCache<string, VerifiedToken>

  constructor (options: StoreAuthOptions) {
    this.#adminDigest = options.adminToken === undefined ? undefined : digest(options.adminToken)
    this.#signer = options.signer
    this.#serviceAccounts = options.serviceAccounts
    this.#cache = new LRUCache({ max: options.cacheSize ?? 10_000 })
  }

  /** Throws a 401 unless `authorization` carries the admin token. */
  requireAdmin (authorization: string | undefined): void {
    if (this.#adminDigest === undefined) throw new AdminTokenRequiredError('write routes are disabled: ADMIN_TOKEN is not set')
    if (!this.#isAdmin(bearerToken(authorization))) throw new AdminTokenRequiredError()
  }

  /** Resolves when `authorization` may read builds of `projectId`; rejects with the 401 or 403 to answer. */
  async authorizeRead (authorization: string | undefined, projectId: string): Promise<void> {
    const token = bearerToken(authorization)
    if (this.#isAdmin(token)) return
    let verified = this.#cache.get(token)
    if (verified === undefined) {
      verified = await this.#verify(token)
    } else if (verified.expiresAtMs <= Date.now()) {
      this.#cache.delete(token)
      throw new StoreInvalidTokenError('expired')
    }
    if (await this.#serviceAccounts.isRevoked(verified.jti)) throw new StoreInvalidTokenError('revoked')
    if (verified.projectId !== projectId) throw new StoreForbiddenProjectError()
  }

  /** Tokens currently remembered (for tests). */
  get cachedTokens (): number { return this.#cache.size }

  #isAdmin (token: string): boolean {
    return this.#adminDigest !== undefined && timingSafeEqual(digest(token), this.#adminDigest)
  }

  async #verify (token: string): Promise<VerifiedToken> {
    let claims
    try {
      claims = await this.#signer.verify(token)
    } catch (error) {
      throw tokenError(error)
    }
    const verified = { projectId: claims.projectId, jti: claims.jti, expiresAtMs: claims.exp * 1000 }
    this.#cache.set(token, verified)
    return verified
  }
}

function digest (token: string): Buffer {
  return createHash('sha256').update(token).digest()
}

function bearerToken (authorization: string | undefined): string {
  if (authorization === undefined) throw new StoreMissingTokenError()
  const match = BEARER.exec(authorization)
  if (match === null) throw new StoreInvalidTokenError('Authorization must be "Bearer <token>"')
  return match[1] as string
}

function tokenError (error: unknown): StoreInvalidTokenError {
  if (error instanceof joseErrors.JWTExpired) return new StoreInvalidTokenError('expired')
  if (error instanceof joseErrors.JOSEAlgNotAllowed) return new StoreInvalidTokenError('algorithm not allowed')
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return new StoreInvalidTokenError('bad signature')
  if (error instanceof joseErrors.JWKSNoMatchingKey) return new StoreInvalidTokenError('not signed by this store')
  if (error instanceof joseErrors.JWTClaimValidationFailed) return new StoreInvalidTokenError(`claim ${error.claim} rejected`)
  return new StoreInvalidTokenError('malformed')
}
