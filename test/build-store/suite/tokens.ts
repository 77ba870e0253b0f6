import { createHmac } from 'node:crypto'
import { generateKeyPair, importJWK, type JWK, SignJWT } from 'jose'
import type { Test } from 'tap'
import { TokenVerifier } from '../../../src/auth/token-verifier.ts'
import { patient } from '../../helpers/timing.ts'
import { ADMIN, ADMIN_TOKEN, bearer, JSON_TYPE, messageBody, type SuiteContext } from './context.ts'

const CHALLENGE = 'Bearer realm="build-store"'
const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
const decode = (part: string | undefined): Record<string, unknown> => JSON.parse(Buffer.from(part ?? '', 'base64url').toString()) as Record<string, unknown>
const inAnHour = () => new Date(Date.now() + 3600_000)

/** Tokens: claims, JWKS, every way a token is refused, expiry, revocation, the verified-token cache. */
export function tokenTests (t: Test, ctx: SuiteContext): void {
  const { main } = ctx

  async function projectWithBuild (): Promise<{ p: string, path: string }> {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/b`
    await main.request(path, { method: 'PUT', headers: ADMIN, body: '{"status":"ready"}' })
    return { p, path }
  }

  t.test('a service-account token: EdDSA, kid of the JWKS, the SPEC\'s claims; it reads its project\'s builds', async t => {
    const { p, path } = await projectWithBuild()
    const before = Date.now()
    const created = await main.request(`/v2/projects/${p}/service-accounts`, { method: 'POST', headers: ADMIN, body: JSON.stringify({ name: 'ci', expiresAt: '2031-06-01T12:00:00Z' }) })
    const after = Date.now()
    t.equal(created.status, 201)
    const account = created.json() as { id: string, name: string, expiresAt: string, token: string }
    const [header, payload] = account.token.split('.')
    const jwks = (await main.request('/.well-known/jwks.json')).json() as { keys: Array<{ kid: string }> }
    t.same(decode(header), { alg: 'EdDSA', kid: jwks.keys[0]?.kid, typ: 'JWT' })
    const claims = decode(payload)
    t.same(Object.keys(claims).sort(), ['exp', 'iat', 'jti', 'name', 'projectId', 'sub'])
    t.match(claims, { sub: account.id, projectId: p, name: 'ci', exp: Date.parse('2031-06-01T12:00:00Z') / 1000 })
    // within the request's own span, in seconds: however slow the machine, not a fixed tolerance
    t.ok((claims.iat as number) >= Math.floor(before / 1000) && (claims.iat as number) <= Math.ceil(after / 1000), `iat ${String(claims.iat)} is when it was made`)
    t.match(claims.jti, /^[0-9a-f-]{36}$/)
    const read = await main.request(path, { headers: bearer(account.token) })
    t.equal(read.status, 200)
    t.match(read.json(), { id: 'b', projectId: p, status: 'ready' })
    t.notOk(JSON.stringify(main.logs).includes(account.token), 'the token is never logged')
  })

  t.test('the sidecar\'s TokenVerifier accepts store tokens through the store\'s JWKS', async t => {
    const p = ctx.project()
    const { token } = await main.store.serviceAccounts.create(p, 'sidecar', inAnHour())
    const verifier = new TokenVerifier({ jwksUrl: new URL(`${main.base}/.well-known/jwks.json`) })
    let failure: unknown
    try { await verifier.authorize(token, p) } catch (error) { failure = error }
    t.equal(failure, undefined, `accepted for its project${failure === undefined ? '' : `: ${String(failure)}`}`)
    let refused: unknown
    try { await verifier.authorize(token, 'another-project') } catch (error) { refused = error }
    t.match(refused, { status: 403 }, 'another project: 403')
  })

  t.test('GET /.well-known/jwks.json: the one Ed25519 public key, no private part', async t => {
    const r = await main.request('/.well-known/jwks.json')
    t.equal(r.status, 200)
    t.equal(r.headers['content-type'], JSON_TYPE)
    const { keys } = r.json() as { keys: Array<Record<string, unknown>> }
    t.equal(keys.length, 1)
    t.same(Object.keys(keys[0] ?? {}).sort(), ['alg', 'crv', 'kid', 'kty', 'use', 'x'])
    t.match(keys[0], { kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig', kid: main.store.signer.kid })
  })

  t.test('401 for every token that is not good, with a Bearer challenge', async t => {
    const { p, path } = await projectWithBuild()
    const { kid } = main.store.signer
    const now = Math.floor(Date.now() / 1000)
    const claims = { sub: 'sa', projectId: p, name: 'x', iat: now, exp: now + 600, jti: 'j-1' }
    const other = await generateKeyPair('EdDSA')
    const [storedKey] = await ctx.backend.database.query<{ private_jwk: JWK }>('SELECT private_jwk FROM signing_keys')
    const storeKey = await importJWK(storedKey?.private_jwk as JWK, 'EdDSA')
    const good = await main.store.serviceAccounts.create(p, 'good', inAnHour())
    const [goodHeader, goodPayload, goodSignature] = good.token.split('.')
    const hsHeader = b64({ alg: 'HS256', kid, typ: 'JWT' })
    const cases: Array<[string, Record<string, string>, string]> = [
      ['no Authorization', {}, 'missing bearer token'],
      ['not Bearer', { authorization: 'Basic YWRtaW46YWRtaW4=' }, 'invalid token: Authorization must be "Bearer <token>"'],
      ['not a JWT', bearer('not-a-jwt'), 'invalid token: malformed'],
      ['expired', bearer(await main.store.signer.sign({ ...claims, exp: now - 60 })), 'invalid token: expired'],
      ['signed by another key with another kid', bearer(await new SignJWT({ projectId: p }).setProtectedHeader({ alg: 'EdDSA', kid: 'other-kid' }).setSubject('sa').setJti('j').setExpirationTime(now + 600).sign(other.privateKey)), 'invalid token: not signed by this store'],
      ['signed by another key under the store\'s kid', bearer(await new SignJWT({ projectId: p }).setProtectedHeader({ alg: 'EdDSA', kid }).setSubject('sa').setJti('j').setExpirationTime(now + 600).sign(other.privateKey)), 'invalid token: bad signature'],
      ['alg none', bearer(`${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`), 'invalid token: algorithm not allowed'],
      ['HS256 keyed with the public key', bearer(`${hsHeader}.${b64(claims)}.${createHmac('sha256', JSON.stringify(main.store.signer.jwks.keys[0])).update(`${hsHeader}.${b64(claims)}`).digest('base64url')}`), 'invalid token: algorithm not allowed'],
      ['a payload changed after signing', bearer(`${goodHeader}.${b64({ ...decode(goodPayload), projectId: 'x' })}.${goodSignature}`), 'invalid token: bad signature'],
      ['no exp', bearer(await new SignJWT({ projectId: p }).setProtectedHeader({ alg: 'EdDSA', kid }).setSubject('sa').setJti('j').sign(storeKey)), 'invalid token: claim exp rejected'],
      ['no projectId', bearer(await new SignJWT({}).setProtectedHeader({ alg: 'EdDSA', kid }).setSubject('sa').setJti('j').setExpirationTime(now + 600).sign(storeKey)), 'invalid token: malformed'],
      ['an admin token that is not the admin token', bearer(`${ADMIN_TOKEN}x`), 'invalid token: malformed']
    ]
    for (const [name, headers, message] of cases) {
      const r = await main.request(path, { headers })
      t.equal(r.status, 401, name)
      t.equal(r.headers['content-type'], JSON_TYPE, name)
      t.equal(r.headers['www-authenticate'], CHALLENGE, name)
      t.same(r.json(), messageBody(message), name)
    }
    t.equal((await main.request(path, { headers: bearer(good.token) })).status, 200, 'the good token still works')
    t.equal((await main.request(path, { headers: ADMIN })).status, 200, 'the admin token reads builds')
  })

  t.test('403 for a valid token of another project', async t => {
    const { path } = await projectWithBuild()
    const { token } = await main.store.serviceAccounts.create(ctx.project(), 'elsewhere', inAnHour())
    const r = await main.request(path, { headers: bearer(token) })
    t.equal(r.status, 403)
    t.same(r.json(), messageBody('token is not valid for this project'))
  })

  t.test('a token is refused from the second its exp passes, even when it was verified before', async t => {
    const { p, path } = await projectWithBuild()
    // whole seconds; at least patient(2000) ms to make it and use it once, however slow the machine
    const expiresAtMs = (Math.floor(Date.now() / 1000) + 1 + patient(2000) / 1000) * 1000
    const { token, expiresAt } = await main.store.serviceAccounts.create(p, 'short', new Date(expiresAtMs))
    t.equal(expiresAt, new Date(expiresAtMs).toISOString())
    t.equal((await main.request(path, { headers: bearer(token) })).status, 200, 'valid (and now remembered)')
    await new Promise(resolve => setTimeout(resolve, expiresAtMs - Date.now() + 20))
    const r = await main.request(path, { headers: bearer(token) })
    t.equal(r.status, 401)
    t.same(r.json(), messageBody('invalid token: expired'))
  })

  t.test('DELETE revokes at once: the next read is 401 and the jti is in the revocation list', async t => {
    const { p, path } = await projectWithBuild()
    const account = await main.store.serviceAccounts.create(p, 'doomed', inAnHour())
    const jti = decode(account.token.split('.')[1]).jti as string
    t.equal((await main.request(path, { headers: bearer(account.token) })).status, 200)
    const before = (await main.request('/.well-known/revoked-tokens')).json() as { revoked: string[] }
    t.notOk(before.revoked.includes(jti))
    const deleted = await main.request(`/v2/projects/${p}/service-accounts/${account.id}`, { method: 'DELETE', headers: ADMIN })
    t.equal(deleted.status, 204)
    t.equal(deleted.text, '')
    const after = await main.request(path, { headers: bearer(account.token) })
    t.equal(after.status, 401)
    t.same(after.json(), messageBody('invalid token: revoked'))
    const list = await main.request('/.well-known/revoked-tokens')
    t.equal(list.status, 200)
    t.equal(list.headers['content-type'], JSON_TYPE)
    t.equal(list.headers['cache-control'], 'no-store')
    const { revoked } = list.json() as { revoked: string[] }
    t.ok(revoked.includes(jti))
    t.notOk(revoked.includes(account.id), 'jti, not the account id')
    t.notOk(list.text.includes(account.token.split('.')[2] as string), 'no token material')
    const again = await main.request(`/v2/projects/${p}/service-accounts/${account.id}`, { method: 'DELETE', headers: ADMIN })
    t.equal(again.status, 404, 'a revoked account is gone')
    t.same(again.json(), messageBody('no such service account in this project'))
    t.match(main.logs.find(line => line.msg === 'service account revoked' && line.serviceAccountId === account.id), { projectId: p })
  })

  t.test('the revocation list holds unexpired revoked tokens of every project, nothing else', async t => {
    const p1 = ctx.project()
    const p2 = ctx.project()
    const a = await main.store.serviceAccounts.create(p1, 'a', inAnHour())
    const b = await main.store.serviceAccounts.create(p2, 'b', inAnHour())
    const kept = await main.store.serviceAccounts.create(p2, 'kept', inAnHour())
    t.equal(await main.store.serviceAccounts.revoke(p1, a.id), true)
    t.equal(await main.store.serviceAccounts.revoke(p2, b.id), true)
    t.equal(await main.store.serviceAccounts.revoke(p1, b.id), false, 'only in its own project')
    await ctx.backend.database.query(
      "INSERT INTO service_accounts (id, project_id, name, jti, expires_at, created_at, revoked_at) VALUES ($1, $2, 'old', $3, now() - interval '1 hour', now() - interval '2 hours', now() - interval '90 minutes')",
      [`old-${p1}`, p1, `jti-expired-${p1}`])
    const { revoked } = (await main.request('/.well-known/revoked-tokens')).json() as { revoked: string[] }
    const jtiOf = (token: string) => decode(token.split('.')[1]).jti as string
    t.ok(revoked.includes(jtiOf(a.token)))
    t.ok(revoked.includes(jtiOf(b.token)))
    t.notOk(revoked.includes(jtiOf(kept.token)), 'not revoked')
    t.notOk(revoked.includes(`jti-expired-${p1}`), 'revoked but expired')
  })

  t.test('verified tokens are remembered within a bound', async t => {
    const small = await ctx.startStore({}, { tokenCacheSize: 2 })
    t.teardown(() => small.close())
    const { p, path } = await projectWithBuild()
    const tokens = await Promise.all([1, 2, 3].map(async i => (await small.store.serviceAccounts.create(p, `t${i}`, inAnHour())).token))
    for (const token of [...tokens, ...tokens]) t.equal((await small.request(path, { headers: bearer(token) })).status, 200)
    t.equal(small.store.auth.cachedTokens, 2)
  })
}
