import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { decodeJwt, generateKeyPair, SignJWT } from 'jose'
import { ACCEPTED_ALGORITHMS, TokenVerifier, type TokenVerifierOptions } from '../../src/auth/token-verifier.ts'
import { createTokenIssuer, serveJwks, type JwksServer, type TokenIssuer } from '../helpers/demo-token-issuer.ts'
import {
  ForbiddenProjectError, InvalidTokenError, type SidecarError, StoreUnreachableError, TokenKeysUnreachableError
} from '../../src/errors.ts'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]
type ErrorClass = new (...args: never[]) => SidecarError

const PROJECT = 'proj-1'

/** A JWKS server on loopback serving `issuers`, closed when the test ends. */
async function jwks (t: Test, issuers: TokenIssuer[]): Promise<JwksServer> {
  const server = await serveJwks(issuers)
  t.teardown(() => server.close())
  return server
}

function verifier (server: JwksServer, options: Partial<TokenVerifierOptions> = {}): TokenVerifier {
  return new TokenVerifier({ jwksUrl: server.url, ...options })
}

/** authorize() must return a Promise (a verification) that rejects; returns the rejection. */
async function rejection (t: Test, result: Promise<void> | undefined): Promise<unknown> {
  t.ok(result instanceof Promise, 'authorize returned a Promise')
  try {
    await result
  } catch (error) {
    return error
  }
  t.fail('expected authorize to reject')
  return undefined
}

/** authorize() must throw synchronously (a cache hit); returns what it threw. */
function syncThrow (t: Test, call: () => Promise<void> | undefined): unknown {
  try {
    const result = call()
    t.fail(`expected a synchronous throw, got ${String(result)}`)
  } catch (error) {
    return error
  }
  return undefined
}

function assertError (t: Test, error: unknown, type: ErrorClass, status: number, message: string): void {
  t.ok(error instanceof type, `a ${type.name}`)
  const e = error as SidecarError
  t.equal(e.status, status)
  t.equal(e.message, message)
  t.equal(e.body(), JSON.stringify({ message }))
}

async function assertInvalid (t: Test, result: Promise<void> | undefined, reason: string): Promise<void> {
  assertError(t, await rejection(t, result), InvalidTokenError, 401, `invalid token: ${reason}`)
}

const FORBIDDEN = 'token is not valid for this project'

function base64url (value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url')
}

const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

t.test('only asymmetric algorithms are accepted', async t => {
  t.same(ACCEPTED_ALGORITHMS, ['EdDSA', 'ES256', 'RS256'])
})

for (const alg of ['EdDSA', 'ES256', 'RS256'] as const) {
  t.test(`a valid ${alg} token is accepted for its project`, async t => {
    const issuer = await createTokenIssuer(alg)
    const server = await jwks(t, [issuer])
    const v = verifier(server)
    const token = await issuer.sign(PROJECT)
    const result = v.authorize(token, PROJECT)
    t.ok(result instanceof Promise, 'first call verifies')
    t.equal(await result, undefined)
    t.equal(server.fetches, 1)
    t.equal(v.cachedTokens, 1)
  })
}

t.test('one server can hold several keys of different algorithms', async t => {
  const issuers = await Promise.all([createTokenIssuer('EdDSA'), createTokenIssuer('ES256'), createTokenIssuer('RS256')])
  const server = await jwks(t, issuers)
  const v = verifier(server)
  for (const issuer of issuers) {
    t.equal(await v.authorize(await issuer.sign(PROJECT), PROJECT), undefined, issuer.alg)
  }
  t.equal(server.fetches, 1)
})

t.test('the caller a token names is its sub, when verified and on a cache hit; a token without one names the empty caller', async t => {
  const issuer = await createTokenIssuer()
  const v = verifier(await jwks(t, [issuer]))
  const token = await issuer.sign(PROJECT, { claims: { sub: 'sa-alice' } })
  const first = { caller: 'before' }
  t.equal(await v.authorize(token, PROJECT, first), undefined)
  t.equal(first.caller, 'sa-alice', 'verified')
  const hit = { caller: 'before' }
  t.equal(v.authorize(token, PROJECT, hit), undefined)
  t.equal(hit.caller, 'sa-alice', 'a cache hit')
  const refused = { caller: 'before' }
  syncThrow(t, () => v.authorize(token, 'proj-2', refused))
  t.equal(refused.caller, 'before', 'a refused token names nobody')
  const anonymous = { caller: 'before' }
  await v.authorize(await issuer.sign(PROJECT, { claims: { sub: undefined } }), PROJECT, anonymous)
  t.equal(anonymous.caller, '')
})

t.test('a valid token for another project is 403, also on a cache hit', async t => {
  const issuer = await createTokenIssuer()
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  const token = await issuer.sign(PROJECT)

  // not cached yet: the verification rejects
  assertError(t, await rejection(t, v.authorize(token, 'proj-2')), ForbiddenProjectError, 403, FORBIDDEN)
  // the verification is remembered: the right project now passes synchronously
  t.equal(v.authorize(token, PROJECT), undefined)
  // cached: the wrong project throws synchronously (no promise)
  assertError(t, syncThrow(t, () => v.authorize(token, 'proj-2')), ForbiddenProjectError, 403, FORBIDDEN)
  t.equal(server.fetches, 1)
})

t.test('a token without a projectId claim (or a non-string one) is 403', async t => {
  const issuer = await createTokenIssuer()
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  const noClaim = await issuer.sign(PROJECT, { claims: { projectId: undefined } })
  t.equal(decodeJwt(noClaim).projectId, undefined, 'the token really has no projectId')
  assertError(t, await rejection(t, v.authorize(noClaim, PROJECT)), ForbiddenProjectError, 403, FORBIDDEN)
  // now cached: a synchronous 403, whatever the project asked for
  assertError(t, syncThrow(t, () => v.authorize(noClaim, '')), ForbiddenProjectError, 403, FORBIDDEN)
  assertError(t, syncThrow(t, () => v.authorize(noClaim, PROJECT)), ForbiddenProjectError, 403, FORBIDDEN)

  const numeric = await issuer.sign(PROJECT, { claims: { projectId: 42 } })
  assertError(t, await rejection(t, v.authorize(numeric, '42')), ForbiddenProjectError, 403, FORBIDDEN)
})

t.test('an expired token is 401 expired', async t => {
  const issuer = await createTokenIssuer()
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  await assertInvalid(t, v.authorize(await issuer.sign(PROJECT, { ttlSeconds: -10 }), PROJECT), 'expired')
  t.equal(v.cachedTokens, 0, 'a rejected token is not cached')
})

t.test('a token without exp is 401: expiry is required', async t => {
  const { publicKey, privateKey } = await generateKeyPair('EdDSA', { extractable: true })
  const { exportJWK } = await import('jose')
  const issuer: TokenIssuer = { kid: 'no-exp', alg: 'EdDSA', jwks: { keys: [{ ...await exportJWK(publicKey), kid: 'no-exp', alg: 'EdDSA' }] }, sign: async () => '' }
  const server = await jwks(t, [issuer])
  const token = await new SignJWT({ projectId: PROJECT }).setProtectedHeader({ alg: 'EdDSA', kid: 'no-exp' }).setIssuedAt().sign(privateKey)
  const v = verifier(server)
  await assertInvalid(t, v.authorize(token, PROJECT), 'claim exp rejected')
  t.equal(v.cachedTokens, 0)
})

t.test('a token signed by another key with the same kid is 401 bad signature', async t => {
  const issuer = await createTokenIssuer('EdDSA')
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  const { privateKey } = await generateKeyPair('EdDSA')
  const forged = await new SignJWT({ projectId: PROJECT })
    .setProtectedHeader({ alg: 'EdDSA', kid: issuer.kid, typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(privateKey)
  await assertInvalid(t, v.authorize(forged, PROJECT), 'bad signature')
  t.equal(v.cachedTokens, 0)
})

t.test('a token whose payload was tampered with is 401 bad signature', async t => {
  const issuer = await createTokenIssuer('ES256')
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  const token = await issuer.sign('proj-other')
  const [header, payload, signature] = token.split('.') as [string, string, string]
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as Record<string, unknown>
  const tampered = `${header}.${base64url({ ...claims, projectId: PROJECT })}.${signature}`
  await assertInvalid(t, v.authorize(tampered, PROJECT), 'bad signature')
  // and the genuine token still works for its own project
  t.equal(await v.authorize(token, 'proj-other'), undefined)
})

t.test('an alg:none token is 401', async t => {
  const issuer = await createTokenIssuer()
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  const now = Math.floor(Date.now() / 1000)
  const payload = { projectId: PROJECT, sub: 'sa-demo', iat: now, exp: now + 3600 }
  await assertInvalid(t, v.authorize(`${base64url({ alg: 'none', typ: 'JWT' })}.${base64url(payload)}.`, PROJECT), 'algorithm not allowed')
  // with the JWKS key's kid too
  await assertInvalid(t, v.authorize(`${base64url({ alg: 'none', typ: 'JWT', kid: issuer.kid })}.${base64url(payload)}.`, PROJECT), 'algorithm not allowed')
  t.equal(v.cachedTokens, 0)
})

t.test('an HS256 token carrying the kid of the JWKS key is 401', async t => {
  const issuer = await createTokenIssuer()
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  const secret = new TextEncoder().encode('a-shared-secret-of-at-least-32-bytes!!')
  const hs256 = await new SignJWT({ projectId: PROJECT })
    .setProtectedHeader({ alg: 'HS256', kid: issuer.kid, typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(secret)
  await assertInvalid(t, v.authorize(hs256, PROJECT), 'algorithm not allowed')
  // HMAC keyed with the public JWK's bytes (the classic key-confusion attack) is refused too
  const publicJwk = new TextEncoder().encode(JSON.stringify(issuer.jwks.keys[0]))
  const confused = await new SignJWT({ projectId: PROJECT })
    .setProtectedHeader({ alg: 'HS256', kid: issuer.kid })
    .setExpirationTime('1h')
    .sign(publicJwk)
  await assertInvalid(t, v.authorize(confused, PROJECT), 'algorithm not allowed')
  t.equal(v.cachedTokens, 0)
})

t.test('garbage strings are 401, never a crash', async t => {
  const issuer = await createTokenIssuer()
  const server = await jwks(t, [issuer])
  const v = verifier(server)
  const garbage = [
    'abc',
    'a.b.c',
    '',
    'x'.repeat(100 * 1024),
    `${'eyJ'.repeat(40_000)}.${'A'.repeat(10_000)}.${'B'.repeat(10_000)}`,
    '...',
    `${base64url({ alg: 'EdDSA', kid: issuer.kid })}.bm90IGpzb24.`,
    `${base64url({ alg: 'EdDSA', kid: issuer.kid })}.${base64url([1, 2])}.c2ln`
  ]
  for (const token of garbage) {
    const error = await rejection(t, v.authorize(token, PROJECT))
    t.ok(error instanceof InvalidTokenError, `InvalidTokenError for a ${token.length}-char string`)
    t.equal((error as SidecarError).status, 401)
    t.match((error as SidecarError).message, /^invalid token: /)
  }
  await assertInvalid(t, v.authorize('abc', PROJECT), 'malformed')
  await assertInvalid(t, v.authorize('a.b.c', PROJECT), 'malformed')
  await assertInvalid(t, v.authorize('', PROJECT), 'malformed')
  await assertInvalid(t, v.authorize('x'.repeat(100 * 1024), PROJECT), 'malformed')
  t.equal(v.cachedTokens, 0)
})

t.test('a token whose kid is unknown is 401 unknown signing key', async t => {
  const served = await createTokenIssuer()
  const stranger = await createTokenIssuer()
  const server = await jwks(t, [served])
  const v = verifier(server)
  await assertInvalid(t, v.authorize(await stranger.sign(PROJECT), PROJECT), 'unknown signing key')
  t.equal(v.cachedTokens, 0)
})

t.test('caching', async t => {
  t.test('a verified token is then authorized synchronously, with no JWKS fetch', async t => {
    const issuer = await createTokenIssuer()
    const server = await jwks(t, [issuer])
    const v = verifier(server)
    const token = await issuer.sign(PROJECT)
    const first = v.authorize(token, PROJECT)
    t.ok(first instanceof Promise)
    await first
    t.equal(server.fetches, 1)
    // a key set change would be noticed by a verification: none happens
    server.issuers = []
    for (let i = 0; i < 100; i++) {
      const result = v.authorize(token, PROJECT)
      if (result !== undefined) {
        t.fail(`call ${i} returned ${String(result)}`)
        break
      }
    }
    t.equal(v.authorize(token, PROJECT), undefined)
    t.equal(server.fetches, 1)
    t.equal(v.cachedTokens, 1)
  })

  t.test('the cache is bounded: the oldest token is dropped and verified again', async t => {
    const issuer = await createTokenIssuer()
    const server = await jwks(t, [issuer])
    const v = verifier(server, { cacheSize: 2 })
    const [a, b, c] = await Promise.all([issuer.sign(PROJECT), issuer.sign(PROJECT), issuer.sign(PROJECT)])
    t.not(a, b)
    t.not(b, c)
    for (const token of [a, b, c]) {
      const result = v.authorize(token, PROJECT)
      t.ok(result instanceof Promise)
      await result
    }
    t.equal(v.cachedTokens, 2)
    t.equal(v.authorize(b, PROJECT), undefined, 'b is cached')
    t.equal(v.authorize(c, PROJECT), undefined, 'c is cached')
    const again = v.authorize(a, PROJECT)
    t.ok(again instanceof Promise, 'a was dropped and is verified again')
    t.equal(await again, undefined)
    t.equal(v.cachedTokens, 2)
    t.equal(v.authorize(a, PROJECT), undefined, 'a is cached again')
    t.equal(v.authorize(c, PROJECT), undefined, 'c is still cached')
    t.ok(v.authorize(b, PROJECT) instanceof Promise, 'b (now the oldest) was dropped')
  })

  t.test('the cache drops the least recently used token: the busiest stays cached', async t => {
    const issuer = await createTokenIssuer()
    const server = await jwks(t, [issuer])
    const v = verifier(server, { cacheSize: 2 })
    const [busy, b, c] = await Promise.all([issuer.sign(PROJECT), issuer.sign(PROJECT), issuer.sign(PROJECT)])
    await v.authorize(busy, PROJECT)
    await v.authorize(b, PROJECT)
    t.equal(v.authorize(busy, PROJECT), undefined, 'busy is used again (a cache hit)')
    await v.authorize(c, PROJECT)
    t.equal(v.authorize(busy, PROJECT), undefined, 'busy, inserted first but used last, is still cached')
    t.ok(v.authorize(b, PROJECT) instanceof Promise, 'b, the least recently used, was dropped')
  })

  t.test('a cached token that expires is then rejected with 401 expired', async t => {
    const issuer = await createTokenIssuer()
    const server = await jwks(t, [issuer])
    const v = verifier(server)
    // start just after a second boundary, so a 1 s token is valid for ~1 s (exp is in whole seconds)
    await sleep(1000 - (Date.now() % 1000) + 5)
    const token = await issuer.sign(PROJECT, { ttlSeconds: 1 })
    const expMs = (decodeJwt(token).exp as number) * 1000
    t.ok(expMs - Date.now() > 500, 'the token is valid for a while yet')
    await v.authorize(token, PROJECT)
    t.equal(v.authorize(token, PROJECT), undefined, 'cached')
    await sleep(Math.max(0, expMs - Date.now()) + 200)
    await assertInvalid(t, v.authorize(token, PROJECT), 'expired')
    t.equal(v.cachedTokens, 0, 'the expired token left the cache')
    // and stays rejected
    await assertInvalid(t, v.authorize(token, PROJECT), 'expired')
  })

  t.test('concurrent first calls for one token fetch the key set once', async t => {
    const issuer = await createTokenIssuer()
    const server = await jwks(t, [issuer])
    const v = verifier(server)
    const token = await issuer.sign(PROJECT)
    const results = Array.from({ length: 10 }, () => v.authorize(token, PROJECT))
    t.ok(results.every(result => result instanceof Promise))
    t.same(await Promise.all(results as Array<Promise<void>>), Array(10).fill(undefined))
    t.equal(server.fetches, 1)
    t.equal(v.cachedTokens, 1)
  })
})

t.test('key rotation', async t => {
  t.test('a new kid triggers one refetch and is accepted', async t => {
    const oldKey = await createTokenIssuer()
    const server = await jwks(t, [oldKey])
    const v = verifier(server, { refetchCooldownMs: 0 })
    t.equal(await v.authorize(await oldKey.sign(PROJECT), PROJECT), undefined)
    t.equal(server.fetches, 1)

    const newKey = await createTokenIssuer('ES256')
    server.issuers = [oldKey, newKey]
    t.equal(await v.authorize(await newKey.sign(PROJECT), PROJECT), undefined)
    t.equal(server.fetches, 2, 'exactly one refetch')
    // a known kid does not refetch
    t.equal(await v.authorize(await newKey.sign(PROJECT), PROJECT), undefined)
    t.equal(await v.authorize(await oldKey.sign(PROJECT), PROJECT), undefined)
    t.equal(server.fetches, 2)
  })

  t.test('with a long cooldown, a rotated key is accepted but a second unknown kid fetches nothing', async t => {
    const oldKey = await createTokenIssuer()
    const server = await jwks(t, [oldKey])
    const v = verifier(server, { refetchCooldownMs: 30_000 })
    t.equal(await v.authorize(await oldKey.sign(PROJECT), PROJECT), undefined)
    t.equal(server.fetches, 1)

    const newKey = await createTokenIssuer()
    server.issuers = [newKey]
    t.equal(await v.authorize(await newKey.sign(PROJECT), PROJECT), undefined, 'the rotated key is accepted')
    t.equal(server.fetches, 2, 'one refetch for the unknown kid')

    const newer = await createTokenIssuer()
    server.issuers = [newKey, newer]
    await assertInvalid(t, v.authorize(await newer.sign(PROJECT), PROJECT), 'unknown signing key')
    t.equal(server.fetches, 2, 'no refetch within the cooldown')
    const stranger = await createTokenIssuer()
    await assertInvalid(t, v.authorize(await stranger.sign(PROJECT), PROJECT), 'unknown signing key')
    t.equal(server.fetches, 2)
    // keys already fetched keep working
    t.equal(await v.authorize(await newKey.sign(PROJECT), PROJECT), undefined)
    t.equal(server.fetches, 2)
  })

  t.test('concurrent calls with a rotated kid share one refetch and are all accepted', async t => {
    const oldKey = await createTokenIssuer()
    const server = await jwks(t, [oldKey])
    const v = verifier(server, { refetchCooldownMs: 30_000 })
    t.equal(await v.authorize(await oldKey.sign(PROJECT), PROJECT), undefined)
    const newKey = await createTokenIssuer('RS256')
    server.issuers = [oldKey, newKey]
    const tokens = await Promise.all(Array.from({ length: 8 }, async () => await newKey.sign(PROJECT)))
    const results = tokens.map(token => v.authorize(token, PROJECT))
    t.ok(results.every(result => result instanceof Promise))
    t.same(await Promise.all(results as Array<Promise<void>>), Array(8).fill(undefined))
    t.equal(server.fetches, 2)
  })

  t.test('a flood of unknown kids on a fresh verifier: the first load, then one refetch', async t => {
    const served = await createTokenIssuer()
    const server = await jwks(t, [served])
    const v = verifier(server, { refetchCooldownMs: 30_000 })
    const strangers = await Promise.all(Array.from({ length: 5 }, async () => await createTokenIssuer()))
    const expectedFetches = [1, 2, 2, 2, 2] // the first call loads the keys; no refetch right after it
    for (const [i, stranger] of strangers.entries()) {
      await assertInvalid(t, v.authorize(await stranger.sign(PROJECT), PROJECT), 'unknown signing key')
      t.equal(server.fetches, expectedFetches[i], `fetches after unknown kid #${i + 1}`)
    }
  })
})

t.test('the key store being unreachable is 502, not 401', async t => {
  t.test('closed port', async t => {
    const issuer = await createTokenIssuer()
    const server = await serveJwks([issuer])
    const url = server.url
    await server.close()
    const v = new TokenVerifier({ jwksUrl: url })
    const token = await issuer.sign(PROJECT)
    const error = await rejection(t, v.authorize(token, PROJECT))
    assertError(t, error, StoreUnreachableError, 502, 'build store unreachable: token keys could not be fetched')
    t.equal((error as SidecarError).code, 'SIDECAR_STORE_UNREACHABLE')
    t.equal(v.cachedTokens, 0)
    // a malformed token is still 401: it is refused before any key is fetched
    await assertInvalid(t, v.authorize('abc', PROJECT), 'malformed')
  })

  t.test('an AUTH_JWKS_URL that is not the store\'s names itself, not the build store', async t => {
    const issuer = await createTokenIssuer()
    const server = await serveJwks([issuer])
    const url = server.url
    await server.close()
    const v = new TokenVerifier({ jwksUrl: url, keysElsewhere: true })
    const error = await rejection(t, v.authorize(await issuer.sign(PROJECT), PROJECT))
    assertError(t, error, TokenKeysUnreachableError, 502, 'token keys unreachable: AUTH_JWKS_URL could not be fetched')
    t.equal((error as SidecarError).code, 'SIDECAR_TOKEN_KEYS_UNREACHABLE')
    t.match((error as SidecarError).reason, new RegExp(`JWKS fetch failed: ${url.href.replace(/[.]/g, '\\.')}`), 'the log reason names the URL')
  })

  t.test('the store answers the JWKS URL with an error status', async t => {
    const issuer = await createTokenIssuer()
    const server = await jwks(t, [issuer])
    const v = new TokenVerifier({ jwksUrl: new URL('/no-such-jwks', server.url) })
    const error = await rejection(t, v.authorize(await issuer.sign(PROJECT), PROJECT))
    assertError(t, error, StoreUnreachableError, 502, 'build store unreachable: token keys could not be fetched')
  })

  t.test('the store answers with something that is not a key set', async t => {
    const store = createServer((_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('not json') })
    await new Promise<void>(resolve => store.listen(0, '127.0.0.1', resolve))
    t.teardown(async () => {
      store.closeAllConnections()
      await new Promise(resolve => store.close(resolve))
    })
    const issuer = await createTokenIssuer()
    const v = new TokenVerifier({ jwksUrl: new URL(`http://127.0.0.1:${(store.address() as AddressInfo).port}/jwks`) })
    const error = await rejection(t, v.authorize(await issuer.sign(PROJECT), PROJECT))
    assertError(t, error, StoreUnreachableError, 502, 'build store unreachable: token keys could not be fetched')
  })

  t.test('a failure is not remembered: once the store answers (after the back-off), the same token is accepted', async t => {
    const issuer = await createTokenIssuer()
    let reachable = false
    let fetches = 0
    const store = createServer((req, res) => {
      fetches++
      if (!reachable) {
        req.socket.destroy() // the connection is cut, as by a store restarting
        return
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(issuer.jwks))
    })
    await new Promise<void>(resolve => store.listen(0, '127.0.0.1', resolve))
    t.teardown(async () => {
      store.closeAllConnections()
      await new Promise(resolve => store.close(resolve))
    })
    const v = new TokenVerifier({ jwksUrl: new URL(`http://127.0.0.1:${(store.address() as AddressInfo).port}/jwks`), retryAfterFailureMs: 100 })
    const token = await issuer.sign(PROJECT)
    assertError(t, await rejection(t, v.authorize(token, PROJECT)), StoreUnreachableError, 502,
      'build store unreachable: token keys could not be fetched')
    t.equal(v.cachedTokens, 0)
    reachable = true
    await sleep(150) // past the back-off after a failed fetch (test/hostile/jwks-fetching.test.ts covers it)
    const before = fetches
    t.equal(await v.authorize(token, PROJECT), undefined)
    t.equal(fetches, before + 1)
    t.equal(v.authorize(token, PROJECT), undefined)
  })
})
