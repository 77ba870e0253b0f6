import { request } from 'node:http'
import t from 'tap'
import { eventually, startHarness, startTestServer } from '../helpers/sidecar-harness.ts'
import { send } from '../helpers/http-client.ts'

t.test('RUNTIME=custom: status, headers and body pass unchanged, streamed', async t => {
  const app = await startTestServer((req, res) => {
    res.writeHead(201, { 'content-type': 'application/vnd.custom', 'x-app': 'custom', 'set-cookie': ['a=1', 'b=2'] })
    res.write('{"not":"wrapped"}')
    res.end(' tail')
  })
  const h = await startHarness(app.url, { RUNTIME: 'custom' })
  t.teardown(async () => { await h.close(); await app.close() })
  const r = await send(`${h.base}/v4/proj/app/anything`, { headers: { authorization: `Bearer ${await h.token()}` } })
  t.equal(r.status, 201)
  t.equal(r.text, '{"not":"wrapped"} tail')
  t.equal(r.headers['content-type'], 'application/vnd.custom')
  t.equal(r.headers['x-app'], 'custom')
  t.same(r.headers['set-cookie'], ['a=1', 'b=2'])
  t.ok(r.headers['x-request-id'])
})

t.test('RUNTIME=cortex asks the app for an unencoded body; custom passes Accept-Encoding on', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('{}') })
  const cortex = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  const custom = await startHarness(app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom' })
  t.teardown(async () => { await cortex.close(); await custom.close(); await app.close() })
  await send(`${cortex.base}/v4/p/a/`, { headers: { 'accept-encoding': 'gzip' } })
  t.equal(app.requests[0]?.headers['accept-encoding'], undefined)
  await send(`${custom.base}/v4/p/a/`, { headers: { 'accept-encoding': 'gzip' } })
  t.equal(app.requests[1]?.headers['accept-encoding'], 'gzip')
})

t.test('cortex: an encoded body the app compressed anyway passes unwrapped', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200, { 'content-encoding': 'br', 'content-type': 'application/json' }).end('\x01\x02') })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await app.close() })
  const r = await send(`${h.base}/v4/p/a/`)
  t.equal(r.headers['content-encoding'], 'br')
  t.equal(r.text, '\x01\x02')
})

t.test('DISABLE_AUTH=true: no token needed, Authorization passes to the app', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end('ok') })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await app.close() })
  t.equal((await send(`${h.base}/v4/any/app/x`)).status, 200)
  await send(`${h.base}/v4/any/app/x`, { headers: { authorization: 'Bearer app-level-token' } })
  t.equal(app.requests[1]?.headers.authorization, 'Bearer app-level-token')
})

t.test('PROJECT_ID and APP_NAME: other projects and apps get 404 before auth', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end('ok') })
  const h = await startHarness(app.url, { PROJECT_ID: 'proj', APP_NAME: 'app' })
  t.teardown(async () => { await h.close(); await app.close() })
  const token = await h.token('proj')
  t.equal((await send(`${h.base}/v4/proj/app/x`, { headers: { authorization: `Bearer ${token}` } })).status, 200)
  const otherApp = await send(`${h.base}/v4/proj/other/x`)
  t.equal(otherApp.status, 404, 'route is checked before auth: no token and still 404')
  t.same(otherApp.json(), { message: 'no such app' })
  t.equal((await send(`${h.base}/v4/other/app/x`, { headers: { authorization: `Bearer ${token}` } })).status, 404)
  t.equal(app.requests.length, 1)
})

t.test('auth: 401 for missing, malformed, expired or foreign-key tokens; 403 for another project', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end('ok') })
  const h = await startHarness(app.url)
  t.teardown(async () => { await h.close(); await app.close() })
  const { createTokenIssuer } = await import('../helpers/demo-token-issuer.ts')
  const stranger = await createTokenIssuer()
  const cases: Array<[string, Record<string, string>, number, string]> = [
    ['missing', {}, 401, 'missing bearer token'],
    ['not bearer', { authorization: 'Basic dXNlcjpwdw==' }, 401, 'invalid token: Authorization must be "Bearer <token>"'],
    ['garbage', { authorization: 'Bearer abc.def.ghi' }, 401, 'invalid token: malformed'],
    ['expired', { authorization: `Bearer ${await h.issuer.sign('proj', { ttlSeconds: -10 })}` }, 401, 'invalid token: expired'],
    ['foreign key', { authorization: `Bearer ${await stranger.sign('proj')}` }, 401, 'invalid token: unknown signing key'],
    ['other project', { authorization: `Bearer ${await h.token('elsewhere')}` }, 403, 'token is not valid for this project']
  ]
  for (const [name, headers, status, message] of cases) {
    const r = await send(`${h.base}/v4/proj/app/x`, { headers })
    t.equal(r.status, status, name)
    t.same(r.json(), { message }, name)
  }
  t.equal(app.requests.length, 0, 'nothing reached the app')
})

t.test('ALLOW_QUERY_TOKEN: access_token works, is removed before forwarding, and the header wins', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end('ok') })
  const h = await startHarness(app.url, { ALLOW_QUERY_TOKEN: 'true' })
  t.teardown(async () => { await h.close(); await app.close() })
  const token = await h.token('proj')
  const r = await send(`${h.base}/v4/proj/app/sse?a=1&access_token=${token}&b=2`)
  t.equal(r.status, 200)
  t.equal(app.requests[0]?.url, '/sse?a=1&b=2')
  const wrong = await h.token('elsewhere')
  const headerWins = await send(`${h.base}/v4/proj/app/x?access_token=${token}`, { headers: { authorization: `Bearer ${wrong}` } })
  t.equal(headerWins.status, 403)
  t.notOk(JSON.stringify(h.logs).includes(token), 'the query token is never logged')
})

t.test('502 when the app, once ready, stops listening; the sidecar keeps serving', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end('ok') })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close() })
  t.equal((await send(`${h.base}/v4/p/a/x`)).status, 200)
  await app.close()
  for (let i = 0; i < 3; i++) {
    const r = await send(`${h.base}/v4/p/a/x`)
    t.equal(r.status, 502)
    t.same(r.json(), { message: 'app unreachable: connection refused' })
  }
  t.equal((await send(`${h.admin}/livez`)).status, 200)
})

t.test('a caller that disconnects aborts its request to the app at once', async t => {
  let appSideClosed = 0
  let arrived = 0
  const app = await startTestServer((req, res) => {
    arrived++
    res.on('close', () => { appSideClosed++ })
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('first bytes')
  })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom' })
  t.teardown(async () => { await h.close(); await app.close() })
  await new Promise<void>((resolve, reject) => {
    const req = request(`${h.base}/v4/p/a/slow`, { agent: false }, res => {
      res.once('data', () => { req.destroy(); resolve() })
    })
    req.on('error', () => {})
    req.end()
    setTimeout(() => { reject(new Error('no data')) }, 3000)
  })
  await eventually(() => appSideClosed === 1, 2000)
  t.equal(arrived, 1)
  await eventually(() => h.logs.some(l => l.msg === 'request' && l.status === 200 && l.aborted === true))
  await eventually(() => h.sidecar.inflight.count === 0)
  t.equal(h.sidecar.inflight.count, 0, 'the app saw the close and nothing is left in flight')
})

t.test('a caller that disconnects before the app answers (cortex) aborts the app request', async t => {
  let appSideClosed = 0
  const app = await startTestServer((req, res) => { res.on('close', () => { appSideClosed++ }) })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await app.close() })
  const req = request(`${h.base}/v4/p/a/hang`, { agent: false })
  req.on('error', () => {})
  req.end()
  await eventually(() => app.requests.length === 1)
  req.destroy()
  await eventually(() => appSideClosed === 1, 2000)
  await eventually(() => h.logs.some(l => l.msg === 'request' && l.status === 499))
  t.equal(h.sidecar.inflight.count, 0)
})

t.test('one log line per finished request, with no secrets in any line', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end('{"ok":true}') })
  const h = await startHarness(app.url)
  t.teardown(async () => { await h.close(); await app.close() })
  const token = await h.token('proj')
  await send(`${h.base}/v4/proj/app/run?secret_param=1&webhookEndpoint=http%3A%2F%2F127.0.0.1%3A9%2Fx%3Fhook_token%3Dabc`, {
    method: 'POST', headers: { authorization: `Bearer ${token}`, 'x-webhook-secret': 'whsec_topsecret', 'x-request-id': 'log-run' }, body: '{}'
  })
  await send(`${h.base}/v4/proj/app/run`, { headers: { authorization: `Bearer ${token}x` } })
  await eventually(() => h.logs.filter(l => l.msg === 'request').length === 2)
  const lines = h.logs.filter(l => l.msg === 'request')
  t.match(lines[0], { method: 'POST', path: '/v4/proj/app/run', status: 200, runId: 'log-run' })
  t.type(lines[0]?.duration, 'number')
  t.match(lines[1], { method: 'GET', path: '/v4/proj/app/run', status: 401 })
  const all = JSON.stringify(h.logs)
  for (const secret of [token, 'whsec_topsecret', 'secret_param', 'hook_token']) t.notOk(all.includes(secret), `no ${secret.slice(0, 12)} in logs`)
  const metrics = await send(`${h.admin}/metrics`)
  t.match(metrics.text, /^sidecar_requests_total\{route="invoke",code="200"\} 1$/m)
  t.match(metrics.text, /^sidecar_requests_total\{route="invoke",code="401"\} 1$/m)
  t.match(metrics.text, /^sidecar_request_duration_seconds_count\{route="invoke"\} 2$/m)
})

t.test('a slow reader pauses the app instead of buffering: every byte arrives in order', async t => {
  const total = 16 * 1024 * 1024
  const pattern = Buffer.alloc(64 * 1024)
  for (let i = 0; i < pattern.length; i++) pattern[i] = i % 251
  const app = await startTestServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' })
    let sent = 0
    const pump = (): void => {
      while (sent < total) {
        sent += pattern.length
        if (!res.write(pattern)) { res.once('drain', pump); return }
      }
      res.end()
    }
    pump()
  })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom' })
  t.teardown(async () => { await h.close(); await app.close() })
  const received = await new Promise<{ bytes: number, ok: boolean }>((resolve, reject) => {
    const req = request(`${h.base}/v4/p/a/big`, { agent: false }, res => {
      res.pause()
      let bytes = 0
      let ok = true
      setTimeout(() => {
        res.on('data', (chunk: Buffer) => {
          for (let i = 0; i < chunk.length; i += 4099) if (chunk[i] !== (bytes + i) % pattern.length % 251) ok = false
          bytes += chunk.length
        })
        res.on('end', () => { resolve({ bytes, ok }) })
        res.resume()
      }, 300)
    })
    req.on('error', reject)
    req.end()
  })
  t.equal(received.bytes, total)
  t.ok(received.ok, 'bytes arrive in order')
})

t.test('a revoked token stops working at the next refresh of the store list, cached or not', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end('ok') })
  const h = await startHarness(app.url)
  t.teardown(async () => { await h.close(); await app.close() })
  const token = await h.token('proj')
  const other = await h.token('proj')
  t.equal((await send(`${h.base}/v4/proj/app/x`, { headers: { authorization: `Bearer ${token}` } })).status, 200, 'verified and cached')
  const { decodeJwt } = await import('jose')
  h.jwks.revoked.push(decodeJwt(token).jti as string)
  await eventually(async () => (await send(`${h.base}/v4/proj/app/x`, { headers: { authorization: `Bearer ${token}` } })).status === 401)
  const refused = await send(`${h.base}/v4/proj/app/x`, { headers: { authorization: `Bearer ${token}` } })
  t.same(refused.json(), { message: 'invalid token: revoked' })
  t.equal((await send(`${h.base}/v4/proj/app/x`, { headers: { authorization: `Bearer ${other}` } })).status, 200, 'other tokens keep working')
  h.jwks.revoked.length = 0
  await eventually(async () => (await send(`${h.base}/v4/proj/app/x`, { headers: { authorization: `Bearer ${token}` } })).status === 200)
})
