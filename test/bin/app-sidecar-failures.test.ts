import t from 'tap'
import { createTokenIssuer } from '../helpers/demo-token-issuer.ts'
import { runBin } from '../helpers/child-process.ts'
import { refusedPort } from '../helpers/ports.ts'
import { eventually, startTestServer } from '../helpers/sidecar-harness.ts'

// Failures that say why, read from the real process's output: every answer the sidecar makes
// itself has its code and cause in the request's log line, and calls waiting for an app that
// never gets ready are named in a warning every 10 s.

const BASE_ENV = { PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', DISABLE_AUTH: 'true' }

// each subtest has a sidecar of its own; two wait on the sidecar's own clocks (the 10 s warning,
// the 5.5 s key-set retry): two at a time, those waits overlap the rest
t.jobs = 2

t.test('a wrong APP_URL: waiting calls are named in a warning with the app URL and the probe\'s error', async t => {
  const nothing = await refusedPort()
  const appUrl = `http://127.0.0.1:${nothing}/`
  const child = runBin('app-sidecar', { ...BASE_ENV, APP_URL: appUrl })
  t.teardown(() => { child.process.kill('SIGKILL') })
  const listening = await child.waitForLine(line => line.msg === 'sidecar listening')
  const call = fetch(`http://127.0.0.1:${listening.port as number}/v4/p/a/run`, { method: 'POST', body: '{}' }).catch(() => undefined)
  const warning = await child.waitForLine(line => line.msg === 'calls are waiting for the app to be ready', 15_000)
  t.equal(warning.level, 40)
  t.equal(warning.appUrl, appUrl)
  t.equal(warning.waiting, 1)
  t.equal(warning.probe, 'connection refused')
  child.process.kill('SIGKILL')
  await call
})

t.test('an app that goes away: the 502\'s log line names the error code, the cause and APP_URL', async t => {
  const app = await startTestServer((req, res) => { res.end('{}') })
  const child = runBin('app-sidecar', { ...BASE_ENV, APP_URL: app.url })
  t.teardown(() => { child.process.kill('SIGKILL') })
  const listening = await child.waitForLine(line => line.msg === 'sidecar listening')
  const base = `http://127.0.0.1:${listening.port as number}`
  t.equal((await fetch(`${base}/v4/p/a/run`, { headers: { 'x-request-id': 'fine-1' } })).status, 200)
  await app.close()
  const r = await fetch(`${base}/v4/p/a/run`, { headers: { 'x-request-id': 'gone-1' } })
  t.equal(r.status, 502)
  t.same(await r.json(), { message: 'app unreachable: connection refused' }, 'the caller is told no more than before')
  const line = await child.waitForLine(line => line.runId === 'gone-1' && line.msg === 'request')
  t.equal(line.status, 502)
  t.equal(line.error, 'SIDECAR_APP_UNREACHABLE')
  t.equal(line.reason, `app unreachable: connection refused (${app.url}/)`)
  const fine = await child.waitForLine(line => line.runId === 'fine-1' && line.msg === 'request')
  t.equal(fine.error, undefined, 'an answer the app gave carries no error')
})

t.test('refusals before the app carry their code and reason; the token never appears', async t => {
  const app = await startTestServer((req, res) => { res.end('{}') })
  t.teardown(() => app.close())
  const child = runBin('app-sidecar', { ...BASE_ENV, DISABLE_AUTH: 'false', APP_URL: app.url, AUTH_JWKS_URL: `${app.url}/jwks`, MAX_BODY_BYTES: '10' })
  t.teardown(() => { child.process.kill('SIGKILL') })
  const listening = await child.waitForLine(line => line.msg === 'sidecar listening')
  const base = `http://127.0.0.1:${listening.port as number}`
  await fetch(`${base}/v4/p/a/run`, { headers: { 'x-request-id': 'no-token' } })
  await fetch(`${base}/v4/p/a/run?webhookEndpoint=ftp://x`, { headers: { 'x-request-id': 'bad-hook', authorization: 'Bearer not.a.jwt' } })
  const noToken = await child.waitForLine(line => line.runId === 'no-token' && line.msg === 'request')
  t.match(noToken, { status: 401, error: 'SIDECAR_MISSING_TOKEN', reason: 'missing bearer token' })
  const badToken = await child.waitForLine(line => line.runId === 'bad-hook' && line.msg === 'request')
  t.match(badToken, { status: 401, error: 'SIDECAR_INVALID_TOKEN' })
  t.notMatch(child.stdout, 'not.a.jwt', 'the token is never logged')
})

t.test('a key set never fetched: /readyz says why (503), calls get 502 with the cause logged, and it recovers by itself', async t => {
  const issuer = await createTokenIssuer()
  let storeUp = false
  const app = await startTestServer((req, res) => {
    if (req.url === '/jwks') {
      if (!storeUp) res.writeHead(500).end('down')
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(issuer.jwks))
      return
    }
    res.end('{}')
  })
  t.teardown(() => app.close())
  const jwksUrl = `${app.url}/jwks`
  const child = runBin('app-sidecar', { ...BASE_ENV, DISABLE_AUTH: 'false', APP_URL: app.url, AUTH_JWKS_URL: jwksUrl })
  t.teardown(() => { child.process.kill('SIGKILL') })
  const listening = await child.waitForLine(line => line.msg === 'sidecar listening')
  const base = `http://127.0.0.1:${listening.port as number}`
  const admin = `http://127.0.0.1:${listening.adminPort as number}`
  // first the app's readiness, then the first key-set fetch, must have been tried
  let ready = await fetch(`${admin}/readyz`)
  await eventually(async () => {
    ready = await fetch(`${admin}/readyz`)
    return !/app is not ready|not fetched yet/.test(await ready.clone().text())
  }, 15_000).catch(() => {}) // the checks below say what it was
  t.equal(ready.status, 503, 'not ready while no token could be verified')
  t.same(await ready.json(), { message: `no token keys yet: JWKS fetch failed: ${jwksUrl} answered 500`, run_store: 'up' })

  const token = await issuer.sign('p')
  const r = await fetch(`${base}/v4/p/a/run`, { headers: { authorization: `Bearer ${token}`, 'x-request-id': 'no-keys' } })
  t.equal(r.status, 502)
  t.same(await r.json(), { message: 'token keys unreachable: AUTH_JWKS_URL could not be fetched' }, 'an AUTH_JWKS_URL elsewhere than the store is named, not the store')
  const line = await child.waitForLine(line => line.runId === 'no-keys' && line.msg === 'request')
  t.match(line, { status: 502, error: 'SIDECAR_TOKEN_KEYS_UNREACHABLE' })
  t.match(line.reason, `JWKS fetch failed: ${jwksUrl} answered 500`)
  t.notMatch(child.stdout, token, 'the token is never logged')

  storeUp = true // the sidecar fetches again by itself (every 5.5 s) and turns ready
  let status = 503
  for (let i = 0; i < 300 && status !== 200; i++) {
    status = (await fetch(`${admin}/readyz`)).status
    if (status !== 200) await new Promise(resolve => setTimeout(resolve, 50))
  }
  t.equal(status, 200, 'ready once a key set arrived, without any caller asking')
  t.equal((await fetch(`${base}/v4/p/a/run`, { headers: { authorization: `Bearer ${token}` } })).status, 200)
})
