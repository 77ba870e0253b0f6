import t from 'tap'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { receiverFor, runsAppFor, runsClient } from '../../helpers/runs-client.ts'
import { eventually, sidecarFor } from '../../helpers/sidecar-harness.ts'
import { openStream } from '../../stream/sse-test-kit.ts'

// docs/console.md, "Access": the console is on the admin port only with CONSOLE_TOKEN; its data
// routes take the login's cookie or the token as a bearer, else 401; its actions also need the
// console's own Origin, else 403; and no webhook secret ever reaches it.

const TOKEN = 'console-token-0123456789'
const APP = { PROJECT_ID: 'proj', APP_NAME: 'app', DISABLE_AUTH: 'true' }
const BEARER = { authorization: `Bearer ${TOKEN}` }
const DATA_GETS = ['/console/api/overview', '/console/api/history', '/console/api/runs', '/console/api/runs/some-run', '/console/api/runs/some-run/events']
const ACTIONS = ['/console/api/runs/some-run/cancel', '/console/api/purge']
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

t.test('without CONSOLE_TOKEN: /console, its files and its data routes are 404 on the admin port; /console is 404 on the public port always', async t => {
  const app = await runsAppFor(t)
  const plain = await sidecarFor(t, app.url, APP)
  for (const path of ['/console', '/console/', '/console/static/console.js', '/console/static/uplot.js', ...DATA_GETS]) {
    const r = await send(`${plain.admin}${path}`, { headers: BEARER })
    t.equal(r.status, 404, `GET ${path}`)
    t.same(r.json(), { message: 'no such route' })
  }
  for (const path of ['/console/login', ...ACTIONS]) t.equal((await send(`${plain.admin}${path}`, { method: 'POST', headers: { ...BEARER, origin: plain.admin } })).status, 405, `POST ${path}: the admin port's GET-only answer`)

  const withConsole = await sidecarFor(t, app.url, { ...APP, CONSOLE_TOKEN: TOKEN })
  for (const h of [plain, withConsole]) {
    for (const path of ['/console', '/console/api/overview', '/console/static/console.js']) {
      t.equal((await send(`${h.base}${path}`, { headers: BEARER })).status, 404, `public port: ${path}`)
    }
  }
  t.equal((await send(`${withConsole.admin}/console`)).status, 200, 'the same sidecar with CONSOLE_TOKEN serves it on the admin port')
})

t.test('the page: its own files only, a strict CSP, no inline script', async t => {
  const app = await runsAppFor(t)
  const h = await sidecarFor(t, app.url, { ...APP, CONSOLE_TOKEN: TOKEN })
  const page = await send(`${h.admin}/console`)
  t.equal(page.status, 200)
  t.equal(page.headers['content-type'], 'text/html; charset=utf-8')
  t.equal(page.headers['content-security-policy'], CSP)
  t.equal(page.headers['x-frame-options'], 'DENY')
  t.equal(page.headers['cache-control'], 'no-store')
  t.same([...page.text.matchAll(/<script([^>]*)>/g)].map(m => m[1]), [' src="/console/static/uplot.js" defer', ' src="/console/static/console.js" defer'], 'every script is a file of the console')
  t.notMatch(page.text, /\son[a-z]+=|style=|https?:\/\//, 'no inline handler, no inline style, no other origin')
  for (const [path, type] of <Array<[string, string]>>[['console.js', 'text/javascript'], ['console.css', 'text/css'], ['uplot.js', 'text/javascript'], ['uplot.css', 'text/css']]) {
    const file = await send(`${h.admin}/console/static/${path}`)
    t.equal(file.status, 200, path)
    t.equal(file.headers['content-type'], `${type}; charset=utf-8`)
    t.equal(file.headers['content-security-policy'], CSP)
  }
  t.equal((await send(`${h.admin}/console/static/nothing.js`)).status, 404)
  t.equal((await send(`${h.admin}/console`, { method: 'POST', headers: { origin: h.admin } })).status, 405)
})

t.test('data routes: 401 without the cookie or bearer, or with a wrong one; 200 with either', async t => {
  const app = await runsAppFor(t)
  const h = await sidecarFor(t, app.url, { ...APP, CONSOLE_TOKEN: TOKEN })
  const wrong = [{}, { authorization: 'Bearer console-token-wrong-0000' }, { authorization: `Basic ${TOKEN}` }, { cookie: 'sidecar_console=forged' }, { cookie: `sidecar_console=${TOKEN}` }]
  for (const path of DATA_GETS) {
    for (const headers of wrong) t.equal((await send(`${h.admin}${path}`, { headers })).status, 401, `GET ${path} ${JSON.stringify(headers)}`)
  }
  for (const path of ACTIONS) {
    for (const headers of wrong) t.equal((await send(`${h.admin}${path}`, { method: 'POST', headers: { ...headers, origin: h.admin } })).status, 401, `POST ${path} ${JSON.stringify(headers)}`)
  }

  const refused = await send(`${h.admin}/console/login`, { method: 'POST', headers: { origin: h.admin, 'content-type': 'application/json' }, body: '{"token":"console-token-wrong-0000"}' })
  t.equal(refused.status, 401)
  t.equal(refused.headers['set-cookie'], undefined, 'a wrong token gets no cookie')
  const login = await send(`${h.admin}/console/login`, { method: 'POST', headers: { origin: h.admin, 'content-type': 'application/x-www-form-urlencoded' }, body: `token=${TOKEN}` })
  t.equal(login.status, 204)
  const cookie = (login.headers['set-cookie'] ?? [])[0] as string
  t.match(cookie, /^sidecar_console=[A-Za-z0-9_-]{43}; Path=\/console; HttpOnly; SameSite=Strict$/)
  t.notMatch(cookie, TOKEN, 'the cookie is not the token')
  const session = { cookie: cookie.split(';')[0] as string }
  for (const headers of [session, BEARER]) {
    const overview = await send(`${h.admin}/console/api/overview`, { headers })
    t.equal(overview.status, 200)
    t.same(overview.json(), {
      app: { project_id: 'proj', app_name: 'app' },
      ready: true,
      slots: { in_use: 0, limit: 0 },
      waiting: 0,
      backlog: { by_urgency: [0, 0, 0, 0, 0, 0, 0, 0], total: 0 },
      busiest_callers: [],
      running: 0,
      run_store: { backend: 'memory', up: true },
      webhooks: { pending: 0, failed: 0 }
    })
    t.same((await send(`${h.admin}/console/api/runs`, { headers })).json(), { runs: [], next_cursor: null })
    t.same((await send(`${h.admin}/console/api/runs/nothing-here`, { headers })).json(), { message: 'no such run' })
  }
  t.equal((await send(`${h.admin}/console/login`, { method: 'POST', headers: { origin: 'http://evil.example', 'content-type': 'application/json' }, body: JSON.stringify({ token: TOKEN }) })).status, 403, 'a login from another origin')
})

t.test('actions: 403 from another origin (or none), with the cookie or the bearer; the run stays queued', async t => {
  const app = await runsAppFor(t)
  const h = await sidecarFor(t, app.url, { ...APP, CONSOLE_TOKEN: TOKEN, REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base, project: 'proj', app: 'app' })
  t.equal((await client.submit('/hold/first', 'first')).status, 202)
  await app.waitForHeld(1)
  t.equal((await client.submit('/json/second', 'second')).status, 202)
  const login = await send(`${h.admin}/console/login`, { method: 'POST', headers: { origin: h.admin }, body: `token=${TOKEN}` })
  const session = { cookie: ((login.headers['set-cookie'] ?? [])[0] as string).split(';')[0] as string }
  for (const credentials of [session, BEARER]) {
    for (const origin of [{ origin: 'http://evil.example' }, { origin: 'null' }, { origin: `${h.admin}.evil.example` }, {}]) {
      for (const path of ['/console/api/runs/second/cancel', '/console/api/purge']) {
        const r = await send(`${h.admin}${path}`, { method: 'POST', headers: { ...credentials, ...origin } })
        t.equal(r.status, 403, `${path} ${JSON.stringify(origin)}`)
        t.same(r.json(), { message: 'origin not allowed' })
      }
    }
  }
  t.equal((await client.read('second')).record.status, 'queued', 'nothing was canceled')

  const canceled = await send(`${h.admin}/console/api/runs/second/cancel`, { method: 'POST', headers: { ...session, origin: h.admin } })
  t.equal(canceled.status, 200, 'the same cancel from the console\'s own origin')
  t.equal((canceled.json() as { status: string }).status, 'canceled')
  t.same((await send(`${h.admin}/console/api/runs/second/cancel`, { method: 'POST', headers: { ...BEARER, origin: h.admin } })).json(), { message: 'run already finished' })
  t.equal((await send(`${h.admin}/console/api/runs/second/cancel`, { headers: BEARER })).status, 405, 'a cancel is a POST')
  t.equal((await client.submit('/json/third', 'third')).status, 202)
  t.same((await send(`${h.admin}/console/api/purge`, { method: 'POST', headers: { ...BEARER, origin: h.admin } })).json(), { canceled: 1 })
  t.equal((await client.read('third')).record.status, 'canceled', 'the purge canceled the queued run')
  t.equal((await client.read('first')).record.status, 'running', 'and not the running one')
  app.held[0]?.res.end('done')
})

t.test('no webhook secret ever reaches the console: page, files, tiles, charts, list, records, events', async t => {
  const app = await runsAppFor(t)
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { ...APP, CONSOLE_TOKEN: TOKEN, REPLICA_CONCURRENCY: '1', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base, project: 'proj', app: 'app' })
  const secrets = ['whsec-console-one-1111', 'whsec-console-two-2222', 'whsec-console-three-333']
  const hook = `webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}`
  t.equal((await client.submit(`/ndjson/streamed?${hook}`, 'streamed', { headers: { 'x-webhook-secret': secrets[0] as string } })).status, 202)
  const stream = await app.waitForHeld(1)
  stream.res.write('{"line":1}\n')
  t.equal((await client.submit(`/json/queued?${hook}`, 'queued', { headers: { 'x-webhook-secret': secrets[1] as string } })).status, 202)
  // a sync call with a key: recorded as a run, waiting for the slot the stream holds
  const keyedCall = client.call(`/json/keyed?${hook}`, { headers: { 'x-webhook-secret': secrets[2] as string, 'idempotency-key': 'k-1', 'x-request-id': 'keyed' } })

  const seen: SentResponse[] = []
  const get = async (path: string): Promise<SentResponse> => {
    const r = await send(`${h.admin}${path}`, { headers: BEARER })
    seen.push(r)
    return r
  }
  for (const path of ['/console', '/console/static/console.js', '/console/static/console.css', '/console/static/uplot.js', '/console/api/overview', '/console/api/history',
    '/console/api/runs', '/console/api/runs/streamed', '/console/api/runs/queued']) t.equal((await get(path)).status, 200, path)
  const events = await openStream(`${h.admin}/console/api/runs/streamed/events`, BEARER)
  stream.res.end('{"line":2}\n')
  await events.done
  const body = events.raw()
  t.match(body, /^id: 0\ndata: {"line":1}\n\nid: 1\ndata: {"line":2}\n\nid: streamed.done\nevent: done\ndata: {"run_id":"streamed","status":"succeeded",/, 'the run\'s events, then done')
  const keyed = await keyedCall
  await client.finished('queued')
  await eventually(() => receiver.attempts.length === 3)
  for (const path of ['/console/api/runs/streamed', '/console/api/runs/queued', '/console/api/runs/keyed', '/console/api/runs', '/console/api/runs?status=succeeded']) {
    t.equal((await get(path)).status, 200, path)
  }
  t.equal(keyed.status, 200)
  t.same(receiver.attempts.map(a => a.headers['x-service-webhook-signature'] !== undefined), [true, true, true], 'the secrets were used: each webhook signed')
  for (const secret of secrets) {
    t.same([...seen.map(r => r.text), body].filter(text => text.includes(secret)), [], `${secret} in no console answer`)
  }
})
