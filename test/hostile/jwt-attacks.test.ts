import { createHmac, generateKeyPairSync, type KeyObject, randomUUID, sign } from 'node:crypto'
import t, { type Test } from 'tap'
import WebSocket from 'ws'
import { type Harness, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { send, type SentResponse } from '../helpers/http-client.ts'
import { patient } from '../helpers/timing.ts'
import { exchange, livez, UUID } from './hostile-kit.ts'

// Forged, confused and oversized tokens. Each gets the 401 of docs/errors.md, "Answers on the
// public port" (or 403 for a valid token of another project), quickly, as a JSON {"message"}; none
// reaches the app, none is logged.

const b64 = (value: unknown): string => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')

/** A compact JWS over exactly these header and payload objects, Ed25519-signed with `key`. */
function signed (header: Record<string, unknown>, payload: Record<string, unknown>, key: KeyObject): string {
  const input = `${b64(header)}.${b64(payload)}`
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`
}

const now = (): number => Math.floor(Date.now() / 1000)
const claims = (extra: Record<string, unknown> = {}): Record<string, unknown> =>
  ({ sub: 'sa-1', projectId: 'proj', name: 'ci', iat: now(), exp: now() + 600, jti: randomUUID(), ...extra })

/** A key the sidecar trusts (served in its JWKS), so headers and claims can be varied under a valid signature. */
const trusted = generateKeyPairSync('ed25519')
const trustedKid = randomUUID()
const trustedJwk = { ...trusted.publicKey.export({ format: 'jwk' }), kid: trustedKid, alg: 'EdDSA', use: 'sig' }
/** An attacker's key, unknown to the sidecar. */
const attacker = generateKeyPairSync('ed25519')
const attackerJwk = attacker.publicKey.export({ format: 'jwk' })

let app: TestServer
let jku: TestServer
let h: Harness
const seen: string[] = []
const tokensSent: string[] = []

t.before(async () => {
  app = await startTestServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ url: req.url, authorization: req.headers.authorization ?? null }))
  })
  app.server.on('request', req => { seen.push(req.url as string) })
  jku = await startTestServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [{ ...attackerJwk, kid: 'attacker' }] }))
  })
  h = await startHarness(app.url, { PROJECT_ID: 'proj' })
  // the JWKS is fetched on the first verification: the trusted key is in it from the start
  h.jwks.issuers.push({ kid: trustedKid, alg: 'EdDSA', jwks: { keys: [trustedJwk] }, sign: async () => { throw new Error('unused') } })
})
t.teardown(async () => {
  await h.close()
  await app.close()
  await jku.close()
})

/** Calls the app through the sidecar with `authorization`, timing the answer. */
async function call (authorization: string | undefined, path = '/x'): Promise<SentResponse & { ms: number }> {
  if (authorization !== undefined) tokensSent.push(authorization)
  const started = Date.now()
  const r = await send(`${h.base}/v4/proj/app${path}`, { headers: authorization === undefined ? {} : { authorization } })
  return Object.assign(r, { ms: Date.now() - started })
}

/** Refused with exactly this status and message, fast, with a run id, and nothing forwarded. */
async function refused (t: Test, authorization: string | undefined, status: number, message: string, label: string): Promise<void> {
  const before = seen.length
  const r = await call(authorization, `/${encodeURIComponent(label).slice(0, 60)}`)
  t.equal(r.status, status, label)
  t.equal(r.text, JSON.stringify({ message }), label)
  t.equal(r.headers['content-type'], 'application/json; charset=utf-8', label)
  t.match(r.headers['x-request-id'], UUID, label)
  // fast is 1 s on a quiet machine; what it excludes, a wait on a key-set fetch (5 s time-out) or a pathological parse, is longer still
  t.ok(r.ms < patient(1000), `${label}: answered in ${r.ms} ms`)
  t.same(seen.slice(before), [], `${label}: the app saw nothing`)
}

t.test('the trusted key works (so every refusal below is about the attack, not the set-up)', async t => {
  const r = await call(`Bearer ${signed({ alg: 'EdDSA', kid: trustedKid, typ: 'JWT' }, claims(), trusted.privateKey)}`)
  t.equal(r.status, 200)
  t.equal((r.json() as { result: { authorization: unknown } }).result.authorization, null, 'the checked Authorization is not forwarded')
  const issued = await call(`Bearer ${await h.token('proj')}`)
  t.equal(issued.status, 200)
})

t.test('alg none, in any spelling, with or without a signature: 401', async t => {
  for (const alg of ['none', 'None', 'NONE', 'nOnE']) {
    const unsigned = `${b64({ alg, typ: 'JWT' })}.${b64(claims())}.`
    await refused(t, `Bearer ${unsigned}`, 401, 'invalid token: algorithm not allowed', `alg ${alg}`)
    const withKid = `${b64({ alg, kid: trustedKid })}.${b64(claims())}.${b64('sig')}`
    await refused(t, `Bearer ${withKid}`, 401, 'invalid token: algorithm not allowed', `alg ${alg} with a trusted kid`)
  }
})

t.test('algorithm confusion: HS256 keyed with the public key is refused', async t => {
  const secrets: Array<[string, Buffer | string]> = [
    ['the raw public key', Buffer.from(trustedJwk.x as string, 'base64url')],
    ['the public JWK text', JSON.stringify(trustedJwk)],
    ['the public key PEM', trusted.publicKey.export({ format: 'pem', type: 'spki' })]
  ]
  for (const [label, secret] of secrets) {
    for (const alg of ['HS256', 'HS384', 'HS512']) {
      const input = `${b64({ alg, kid: trustedKid, typ: 'JWT' })}.${b64(claims())}`
      const mac = createHmac(`sha${alg.slice(2)}`, secret).update(input).digest('base64url')
      await refused(t, `Bearer ${input}.${mac}`, 401, 'invalid token: algorithm not allowed', `${alg} with ${label}`)
    }
  }
})

t.test('an asymmetric alg that does not match the key named by kid: 401', async t => {
  for (const alg of ['ES256', 'RS256']) {
    const forged = `${b64({ alg, kid: trustedKid })}.${b64(claims())}.${b64('x'.repeat(64))}`
    await refused(t, `Bearer ${forged}`, 401, 'invalid token: unknown signing key', `${alg} under an Ed25519 kid`)
  }
})

t.test('wrong kid, right kid with the wrong key, tampered payload, stripped signature: 401', async t => {
  await refused(t, `Bearer ${signed({ alg: 'EdDSA', kid: 'no-such-key' }, claims(), attacker.privateKey)}`, 401,
    'invalid token: unknown signing key', 'unknown kid')
  await refused(t, `Bearer ${signed({ alg: 'EdDSA', kid: trustedKid }, claims(), attacker.privateKey)}`, 401,
    'invalid token: bad signature', 'trusted kid, attacker key')
  const genuine = signed({ alg: 'EdDSA', kid: trustedKid }, claims(), trusted.privateKey)
  const [header, , signature] = genuine.split('.')
  await refused(t, `Bearer ${header}.${b64(claims({ projectId: 'proj', sub: 'admin', exp: now() + 10 ** 8 }))}.${signature}`, 401,
    'invalid token: bad signature', 'payload swapped under a genuine signature')
  await refused(t, `Bearer ${genuine.slice(0, genuine.lastIndexOf('.') + 1)}`, 401, 'invalid token: bad signature', 'signature stripped')
})

t.test('keys offered by the token itself (jwk, jku, x5u) are never used or fetched', async t => {
  const header = { alg: 'EdDSA', kid: trustedKid, jwk: { ...attackerJwk, kid: trustedKid }, jku: `${jku.url}/jwks.json`, x5u: `${jku.url}/cert.pem` }
  await refused(t, `Bearer ${signed(header, claims(), attacker.privateKey)}`, 401, 'invalid token: bad signature', 'embedded jwk under the trusted kid')
  const { kid: _kid, ...noKid } = header
  // without a kid every trusted Ed25519 key is tried, none verifies (jose: several keys matched)
  await refused(t, `Bearer ${signed(noKid, claims(), attacker.privateKey)}`, 401, 'invalid token: malformed', 'embedded jwk, no kid')
  await refused(t, `Bearer ${signed({ alg: 'EdDSA', kid: 'attacker', jku: `${jku.url}/jwks.json` }, claims(), attacker.privateKey)}`, 401,
    'invalid token: unknown signing key', 'jku naming the attacker key set')
  t.equal(jku.requests.length, 0, 'the attacker\'s key server was never asked')
})

t.test('a flood of unknown kids refetches the key set at most once', async t => {
  const fetchesBefore = h.jwks.fetches
  for (let i = 0; i < 30; i++) {
    await refused(t, `Bearer ${signed({ alg: 'EdDSA', kid: `kid-${i}-${randomUUID()}` }, claims(), attacker.privateKey)}`, 401,
      'invalid token: unknown signing key', `unknown kid ${i}`)
  }
  t.ok(h.jwks.fetches - fetchesBefore <= 1, `${h.jwks.fetches - fetchesBefore} refetches for 30 unknown kids`)
  t.ok(h.jwks.fetches <= 2, `${h.jwks.fetches} fetches in all: the first, and at most one refetch per 30 s for unknown kids`)
})

t.test('a crit header the verifier does not understand is refused even under a valid signature', async t => {
  await refused(t, `Bearer ${signed({ alg: 'EdDSA', kid: trustedKid, crit: ['x-must-understand'], 'x-must-understand': true }, claims(), trusted.privateKey)}`,
    401, 'invalid token: malformed', 'crit: unknown extension')
  await refused(t, `Bearer ${signed({ alg: 'EdDSA', kid: trustedKid, crit: ['exp'] }, claims(), trusted.privateKey)}`,
    401, 'invalid token: malformed', 'crit naming a registered claim')
})

t.test('exp: required, a number, in the future; nbf honoured', async t => {
  const key = trusted.privateKey
  const header = { alg: 'EdDSA', kid: trustedKid }
  await refused(t, `Bearer ${signed(header, claims({ exp: 1 }), key)}`, 401, 'invalid token: expired', 'exp in 1970')
  await refused(t, `Bearer ${signed(header, claims({ exp: now() - 5 }), key)}`, 401, 'invalid token: expired', 'exp just past')
  const { exp: _exp, ...noExp } = claims()
  await refused(t, `Bearer ${signed(header, noExp, key)}`, 401, 'invalid token: claim exp rejected', 'no exp')
  await refused(t, `Bearer ${signed(header, claims({ exp: String(now() + 600) }), key)}`, 401, 'invalid token: claim exp rejected', 'exp as a string')
  await refused(t, `Bearer ${signed(header, claims({ nbf: now() + 3600 }), key)}`, 401, 'invalid token: claim nbf rejected', 'nbf in the future')
  const farFuture = await call(`Bearer ${signed(header, claims({ exp: 32_503_680_000 }), key)}`)
  t.equal(farFuture.status, 200, 'a far-future exp from a trusted key is valid: the SPEC sets no longest lifetime')
})

t.test('a valid token of another project, or without a usable projectId: 403', async t => {
  const header = { alg: 'EdDSA', kid: trustedKid }
  await refused(t, `Bearer ${await h.token('other')}`, 403, 'token is not valid for this project', 'issued for another project')
  for (const [label, projectId] of [['missing', undefined], ['PROJ (case differs)', 'PROJ'], ['an array', ['proj']], ['a number', 1], ['null', null]] as const) {
    const payload = claims({ projectId })
    if (projectId === undefined) delete payload.projectId
    await refused(t, `Bearer ${signed(header, payload, trusted.privateKey)}`, 403, 'token is not valid for this project', `projectId ${label}`)
  }
})

t.test('malformed tokens and schemes: 401', async t => {
  const cases: Array<[string | undefined, string, string]> = [
    [undefined, 'missing bearer token', 'no Authorization'],
    ['Basic dXNlcjpwYXNz', 'invalid token: Authorization must be "Bearer <token>"', 'Basic'],
    ['Bearer', 'invalid token: Authorization must be "Bearer <token>"', 'Bearer alone'],
    ['Bearer a b', 'invalid token: Authorization must be "Bearer <token>"', 'two tokens'],
    ['Bearer a.b', 'invalid token: malformed', 'two parts'],
    ['Bearer a.b.c.d.e', 'invalid token: malformed', 'five parts (JWE shape)'],
    [`Bearer ${b64('not json')}.${b64(claims())}.${b64('s')}`, 'invalid token: malformed', 'header not JSON'],
    [`Bearer ${b64({ kid: trustedKid })}.${b64(claims())}.${b64('s')}`, 'invalid token: malformed', 'no alg'],
    [`Bearer ${b64(JSON.parse('['.repeat(2000) + ']'.repeat(2000)))}.${b64(claims())}.${b64('s')}`, 'invalid token: malformed', 'deeply nested header']
  ]
  for (const [authorization, message, label] of cases) await refused(t, authorization, 401, message, label)
})

t.test('size: a 1 MiB token never reaches a verifier; a 14 KiB forgery is refused as fast as a small one', async t => {
  const before = seen.length
  const huge = ['GET /v4/proj/app/huge HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ']
  for (let i = 0; i < 16; i++) huge.push('A'.repeat(64 * 1024))
  huge.push('\r\n\r\n')
  const x = await exchange(h.sidecar.port, huge, { stopWhenAnswered: true, ms: patient(3000) })
  // 431 is the parser's answer, before any verifier; the time only excludes a server reading on to the end
  t.equal(x.responses[0]?.status, 431)
  t.ok(x.elapsedMs < patient(1000), `${x.elapsedMs} ms`)
  t.same(seen.slice(before), [])
  await refused(t, `Bearer ${signed({ alg: 'EdDSA', kid: trustedKid }, claims({ pad: 'p'.repeat(10 * 1024) }), attacker.privateKey)}`, 401,
    'invalid token: bad signature', '14 KiB forged payload')
  await refused(t, `Bearer ${'A'.repeat(14 * 1024)}`, 401, 'invalid token: malformed', '14 KiB of base64url')
  const big = await call(`Bearer ${signed({ alg: 'EdDSA', kid: trustedKid }, claims({ pad: 'p'.repeat(10 * 1024) }), trusted.privateKey)}`)
  t.equal(big.status, 200, 'a big token a trusted key signed is valid: only the header limit bounds its size')
})

t.test('duplicate Authorization headers: the first counts, neither reaches the app', async t => {
  const good = `Bearer ${await h.token('proj')}`
  const before = seen.length
  const first = await exchange(h.sidecar.port, `GET /v4/proj/app/dup HTTP/1.1\r\nHost: s\r\nAuthorization: ${good}\r\nAuthorization: Bearer forged\r\nConnection: close\r\n\r\n`)
  t.equal(first.responses[0]?.status, 200)
  t.equal((JSON.parse(first.responses[0]?.text ?? '') as { result: { authorization: unknown } }).result.authorization, null)
  t.notOk(app.requests[app.requests.length - 1]?.rawHeaders.some(name => name.toLowerCase() === 'authorization'))
  const second = await exchange(h.sidecar.port, `GET /v4/proj/app/dup HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer forged\r\nAuthorization: ${good}\r\nConnection: close\r\n\r\n`)
  t.equal(second.responses[0]?.status, 401)
  t.same(seen.slice(before), ['/dup'])
})

t.test('a query access_token is not accepted unless ALLOW_QUERY_TOKEN is set', async t => {
  const before = seen.length
  const r = await send(`${h.base}/v4/proj/app/q?access_token=${await h.token('proj')}`)
  t.equal(r.status, 401)
  t.equal(r.text, '{"message":"missing bearer token"}')
  t.same(seen.slice(before), [])
})

t.test('a WebSocket upgrade with a forged token is refused the same way, before the app', async t => {
  const before = seen.length
  const forged = `${b64({ alg: 'none' })}.${b64(claims())}.`
  const ws = new WebSocket(`ws://127.0.0.1:${h.sidecar.port}/v4/proj/app/ws`, { headers: { authorization: `Bearer ${forged}` } })
  const status = await new Promise<number>(resolve => {
    ws.on('unexpected-response', (_req, res) => { resolve(res.statusCode ?? 0); res.resume() })
    ws.on('open', () => { resolve(101) })
    ws.on('error', () => { resolve(-1) })
  })
  ws.terminate()
  t.equal(status, 401)
  t.same(seen.slice(before), [])
})

t.test('no token, forged or genuine, ever reaches a log line', async t => {
  const logged = h.logs.map(line => JSON.stringify(line)).join('\n')
  const leaked = tokensSent.map(header => header.replace(/^\S+ /, '')).filter(token => token.length >= 8 && logged.includes(token))
  t.same(leaked, [])
  t.ok(h.logs.filter(line => line.msg === 'request').length >= tokensSent.length, 'every call was logged, without its token')
  t.ok(await livez(h))
})
