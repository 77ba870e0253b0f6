import { randomUUID } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { exportJWK, generateKeyPair, type JSONWebKeySet, type JWTPayload, SignJWT } from 'jose'

/**
 * A stand-in for the build store's token signer, for the tests and the benchmarks: one asymmetric key
 * pair, its JWKS, and tokens with the store's claims (`sub`, `projectId`, `name`, `iat`, `exp`, `jti`).
 */
export interface TokenIssuer {
  readonly kid: string
  readonly alg: string
  readonly jwks: JSONWebKeySet
  /** A token for `projectId` that expires in `ttlSeconds` (negative: already expired). */
  sign: (projectId: string, options?: { ttlSeconds?: number, claims?: JWTPayload }) => Promise<string>
}

export async function createTokenIssuer (alg: 'EdDSA' | 'ES256' | 'RS256' = 'EdDSA'): Promise<TokenIssuer> {
  const { publicKey, privateKey } = await generateKeyPair(alg, { extractable: true })
  const kid = randomUUID()
  const jwk = { ...await exportJWK(publicKey), kid, alg, use: 'sig' }
  return {
    kid,
    alg,
    jwks: { keys: [jwk] },
    sign: async (projectId, options = {}) => {
      const now = Math.floor(Date.now() / 1000)
      // `claims` may replace `sub` (or drop it, as undefined)
      return await new SignJWT({ sub: 'sa-demo', projectId, name: 'demo', ...options.claims })
        .setProtectedHeader({ alg, kid, typ: 'JWT' })
        .setIssuedAt(now)
        .setExpirationTime(now + (options.ttlSeconds ?? 3600))
        .setJti(randomUUID())
        .sign(privateKey)
    }
  }
}

/** Serves `GET /.well-known/jwks.json` for one or more issuers; counts the fetches. */
export interface JwksServer {
  readonly url: URL
  readonly server: Server
  fetches: number
  issuers: TokenIssuer[]
  /** Token ids served at `/.well-known/revoked-tokens`, as the build store does. */
  revoked: string[]
  close: () => Promise<void>
}

export async function serveJwks (issuers: TokenIssuer[], port = 0): Promise<JwksServer> {
  const state: JwksServer = {
    url: new URL('http://127.0.0.1/'),
    server: createServer((req, res) => {
      if (req.url === '/.well-known/jwks.json') {
        state.fetches++
        const body = JSON.stringify({ keys: state.issuers.flatMap(issuer => issuer.jwks.keys) })
        res.writeHead(200, { 'content-type': 'application/json' }).end(body)
        return
      }
      if (req.url === '/.well-known/revoked-tokens') {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ revoked: state.revoked }))
        return
      }
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"not found"}')
    }),
    fetches: 0,
    issuers,
    revoked: [],
    close: async () => {
      state.server.closeAllConnections()
      await new Promise(resolve => state.server.close(resolve))
    }
  }
  await new Promise<void>(resolve => state.server.listen(port, '127.0.0.1', resolve))
  const url = new URL(`http://127.0.0.1:${(state.server.address() as AddressInfo).port}/.well-known/jwks.json`)
  Object.assign(state, { url })
  return state
}
