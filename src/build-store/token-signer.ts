import { randomUUID } from 'node:crypto'
import {
  createLocalJWKSet, exportJWK, generateKeyPair, importJWK, type JSONWebKeySet, type JWK, jwtVerify,
  type JWTVerifyGetKey, SignJWT
} from 'jose'
import type { Database } from './database.ts'

/** The claims of a service-account token. */
export interface TokenClaims {
  /** The service account's id. */
  readonly sub: string
  readonly projectId: string
  readonly name: string
  /** Expiry, epoch seconds. */
  readonly exp: number
  readonly jti: string
}

const ALG = 'EdDSA'
/** Serialises the first start of several stores on one empty database: one key is made, not two. */
const KEY_LOCK = 707_000_002

interface KeyRow { kid: string, private_jwk: JWK, public_jwk: JWK }

/**
 * Signs service-account tokens with the store's Ed25519 key and verifies them. The key pair is
 * generated at the first start and kept in the database, so tokens outlive restarts.
 */
export class TokenSigner {
  readonly kid: string
  /** The public keys, as `/.well-known/jwks.json` serves them. */
  readonly jwks: JSONWebKeySet
  readonly #privateKey: CryptoKey
  readonly #publicKeys: JWTVerifyGetKey

  private constructor (kid: string, privateKey: CryptoKey, jwks: JSONWebKeySet) {
    this.kid = kid
    this.#privateKey = privateKey
    this.jwks = jwks
    this.#publicKeys = createLocalJWKSet(jwks)
  }

  /** Loads the signing key from `database`, generating and storing it when there is none yet. */
  static async open (database: Database): Promise<TokenSigner> {
    const rows = await database.transaction(async tx => {
      await tx.query('SELECT pg_advisory_xact_lock($1)', [KEY_LOCK])
      const existing = await tx.query<KeyRow>('SELECT kid, private_jwk, public_jwk FROM signing_keys ORDER BY created_at DESC, kid')
      if (existing.length > 0) return existing
      const created = await generateKey()
      await tx.query('INSERT INTO signing_keys (kid, alg, private_jwk, public_jwk, created_at) VALUES ($1, $2, $3, $4, now())',
        [created.kid, ALG, JSON.stringify(created.private_jwk), JSON.stringify(created.public_jwk)])
      return [created]
    })
    const newest = rows[0] as KeyRow
    const privateKey = await importJWK(newest.private_jwk, ALG) as CryptoKey
    return new TokenSigner(newest.kid, privateKey, { keys: rows.map(row => row.public_jwk) })
  }

  /** A JWT carrying `claims`, issued now, with this key's `kid` in its header. */
  async sign (claims: TokenClaims): Promise<string> {
    return await new SignJWT({ projectId: claims.projectId, name: claims.name })
      .setProtectedHeader({ alg: ALG, kid: this.kid, typ: 'JWT' })
      .setSubject(claims.sub)
      .setIssuedAt()
      .setExpirationTime(claims.exp)
      .setJti(claims.jti)
      .sign(this.#privateKey)
  }

  /**
   * The claims of a token this store signed, when its signature and `exp` hold. Rejects with
   * jose's errors otherwise: `none`, symmetric algorithms and unknown keys never pass.
   */
  async verify (token: string): Promise<TokenClaims> {
    const { payload } = await jwtVerify(token, this.#publicKeys, { algorithms: [ALG], requiredClaims: ['exp', 'sub', 'jti'] })
    if (typeof payload.projectId !== 'string') throw new TypeError('claim projectId missing')
    return {
      sub: payload.sub as string,
      projectId: payload.projectId,
      name: typeof payload.name === 'string' ? payload.name : '',
      exp: payload.exp as number,
      jti: payload.jti as string
    }
  }
}

async function generateKey (): Promise<KeyRow> {
  const { publicKey, privateKey } = await generateKeyPair(ALG, { extractable: true })
  const kid = randomUUID()
  const meta = { kid, alg: ALG, use: 'sig' }
  return {
    kid,
    private_jwk: { ...await exportJWK(privateKey), ...meta },
    public_jwk: { ...await exportJWK(publicKey), ...meta }
  }
}
