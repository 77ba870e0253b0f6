import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { ALLOWED_METHODS, EXPOSED_HEADERS } from '../../src/call/cors.ts'
import { metric } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, type Harness, sidecarFor, startTestServer, type TestHandler, type TestServer } from '../helpers/sidecar-harness.ts'

// docs/routes.md, "CORS: browser pages on other origins" (CORS_ALLOWED_ORIGINS): an allowed
// Origin's answers carry Access-Control-Allow-Origin (its origin), Vary: Origin and
// Access-Control-Expose-Headers, the sidecar's own errors included; its preflight is answered 204
// by the sidecar (no token, never the app); another origin's preflight is 403
// {"message": "origin not allowed"} and its other requests carry no CORS header; unset, there is
// no CORS header anywhere and OPTIONS is a call.

const PAGE = 'https://page.example'
const OTHER = 'https://evil.example'

/** The exposed list exactly as docs/routes.md, "CORS: browser pages on other origins" writes it. */
t.equal(EXPOSED_HEADERS, 'X-Request-Id, Idempotent-Replayed, Server-Timing, Location, Retry-After, Preference-Applied')
t.equal(ALLOWED_METHODS, 'GET, HEAD, POST, PUT, PATCH, DELETE')

/** The CORS headers of an answer (and Vary), by name. */
const corsOf = (headers: IncomingHttpHeaders): Record<string, unknown> =>
  Object.fromEntries(Object.entries(headers).filter(([name]) => name.startsWith('access-control-') || name === 'vary'))

/** What an allowed origin's answers carry besides the preflight's own headers. */
const allowedFor = (origin: string): Record<string, string> => ({
  'access-control-allow-origin': origin,
  vary: 'Origin',
  'access-control-expose-headers': EXPOSED_HEADERS
})

const json = (body: unknown, extra: Record<string, string> = {}) => (_req: IncomingMessage, res: ServerResponse): void => {
  res.writeHead(200, { 'content-type': 'application/json', ...extra }).end(JSON.stringify(body))
}

async function setUp (t: Test, env: Record<string, string>, handler: TestHandler = json({ ok: true })): Promise<{ app: TestServer, h: Harness }> {
  const app = await startTestServer(handler)
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, env)
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  return { app, h }
}

const preflight = (origin: string, extra: Record<string, string> = {}): Record<string, string> => ({
  origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'Authorization, content-type,X-Request-Id', ...extra
})

t.test('an allowed origin\'s preflight: 204 from the sidecar, no token, the exact headers; the app never called', async t => {
  const { app, h } = await setUp(t, { CORS_ALLOWED_ORIGINS: `${PAGE},http://localhost:5173`, PROJECT_ID: 'proj' })
  const r = await send(`${h.base}/v4/proj/app/predict?x=1`, { method: 'OPTIONS', headers: { ...preflight(PAGE), 'x-request-id': 'pre-1' } })
  t.equal(r.status, 204)
  t.same(corsOf(r.headers), {
    ...allowedFor(PAGE),
    'access-control-allow-methods': 'GET, HEAD, POST, PUT, PATCH, DELETE',
    'access-control-allow-headers': 'authorization, content-type, x-request-id',
    'access-control-max-age': '600'
  }, 'every header the preflight asked for, the methods, 10 minutes')
  t.equal(r.headers['x-request-id'], 'pre-1')
  t.equal(r.body.length, 0, 'no body')
  t.equal(r.headers['content-type'], undefined)

  const second = await send(`${h.base}/v4/proj/app/`, { method: 'OPTIONS', headers: { origin: 'http://localhost:5173', 'access-control-request-method': 'GET' } })
  t.equal(second.status, 204, 'the second origin of the list')
  t.equal(second.headers['access-control-allow-origin'], 'http://localhost:5173')
  t.equal(second.headers['access-control-allow-headers'], undefined, 'none asked, none named')

  const elsewhere = await send(`${h.base}/v4/another/app/predict`, { method: 'OPTIONS', headers: preflight(PAGE) })
  t.equal(elsewhere.status, 204, 'answered before the route check: the real call gets a 404 the page can read')
  t.equal(app.requests.length, 0, 'no preflight reached the app')
  await eventually(() => h.logs.some(line => line.runId === 'pre-1'))
  t.match(h.logs.find(line => line.runId === 'pre-1'), { method: 'OPTIONS', path: '/v4/proj/app/predict', status: 204 }, 'logged like any call')
  t.equal(await metric(h, 'sidecar_requests_total', { route: 'invoke', code: '204' }), 3)
})

t.test('an allowed origin\'s calls: the app\'s answer and the sidecar\'s own errors carry the CORS headers', async t => {
  const { h } = await setUp(t, { CORS_ALLOWED_ORIGINS: PAGE, PROJECT_ID: 'proj' }, (req, res) => {
    if (req.url === '/stream') res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('1\n2\n')
    else json({ ok: true })(req, res)
  })
  const token = await h.token('proj')
  const ok = await send(`${h.base}/v4/proj/app/predict`, { method: 'POST', headers: { origin: PAGE, authorization: `Bearer ${token}`, 'x-request-id': 'call-1' }, body: '{}' })
  t.equal(ok.status, 200)
  t.same(corsOf(ok.headers), allowedFor(PAGE), 'the cortex envelope')
  t.equal(ok.headers['x-request-id'], 'call-1')
  t.match(ok.headers['server-timing'], /^queue;dur=\d/)

  const stream = await send(`${h.base}/v4/proj/app/stream`, { headers: { origin: PAGE, authorization: `Bearer ${token}` } })
  t.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.same(corsOf(stream.headers), allowedFor(PAGE), 'a converted stream')

  const noToken = await send(`${h.base}/v4/proj/app/predict`, { method: 'POST', headers: { origin: PAGE }, body: '{}' })
  t.equal(noToken.status, 401)
  t.equal(noToken.text, '{"message":"missing bearer token"}')
  t.same(corsOf(noToken.headers), allowedFor(PAGE), 'a 401 the page can read')
  t.match(noToken.headers['x-request-id'], /^[0-9a-f-]{36}$/)

  const unknown = await send(`${h.base}/v4/another/app/predict`, { headers: { origin: PAGE, authorization: `Bearer ${token}` } })
  t.equal(unknown.status, 404)
  t.same(corsOf(unknown.headers), allowedFor(PAGE), 'a 404 too')

  const options = await send(`${h.base}/v4/proj/app/predict`, { method: 'OPTIONS', headers: { origin: PAGE, authorization: `Bearer ${token}` } })
  t.equal(options.status, 200, 'an OPTIONS without Access-Control-Request-Method is a call')
  t.same(corsOf(options.headers), allowedFor(PAGE))
})

t.test('the app\'s own CORS headers give way to the sidecar\'s; its Vary keeps Origin', async t => {
  const { h } = await setUp(t, { CORS_ALLOWED_ORIGINS: PAGE, DISABLE_AUTH: 'true', RUNTIME: 'custom' },
    json({ ok: true }, { 'access-control-allow-origin': '*', 'access-control-allow-credentials': 'true', vary: 'Accept-Encoding' }))
  const allowed = await send(`${h.base}/v4/proj/app/x`, { headers: { origin: PAGE } })
  t.same(corsOf(allowed.headers), { ...allowedFor(PAGE), vary: 'Accept-Encoding, Origin' })
  const other = await send(`${h.base}/v4/proj/app/x`, { headers: { origin: OTHER } })
  t.same(corsOf(other.headers), { vary: 'Accept-Encoding, Origin' }, 'no CORS header for another origin, not even the app\'s')
})

t.test('an origin not allowed: its preflight is 403 {"message":"origin not allowed"}, its calls carry no CORS header', async t => {
  const { app, h } = await setUp(t, { CORS_ALLOWED_ORIGINS: PAGE })
  for (const origin of [OTHER, 'https://page.example:8443', 'http://page.example', 'null']) {
    const r = await send(`${h.base}/v4/proj/app/predict`, { method: 'OPTIONS', headers: { ...preflight(origin), 'x-request-id': 'refused-1' } })
    t.equal(r.status, 403, origin)
    t.equal(r.text, '{"message":"origin not allowed"}')
    t.equal(r.headers['content-type'], 'application/json; charset=utf-8')
    t.equal(r.headers['x-request-id'], 'refused-1')
    t.same(corsOf(r.headers), {}, `${origin}: no CORS header`)
  }
  const call = await send(`${h.base}/v4/proj/app/predict`, { method: 'POST', headers: { origin: OTHER, authorization: `Bearer ${await h.token()}` }, body: '{}' })
  t.equal(call.status, 200, 'the call itself is served (the browser keeps its answer from the page)')
  t.same(corsOf(call.headers), {})
  const noToken = await send(`${h.base}/v4/proj/app/predict`, { headers: { origin: OTHER } })
  t.equal(noToken.status, 401)
  t.same(corsOf(noToken.headers), {})
  t.equal(app.requests.length, 1, 'only the authorized call reached the app')
  await eventually(() => h.logs.filter(line => line.runId === 'refused-1').length === 4)
  t.match(h.logs.find(line => line.runId === 'refused-1'), { status: 403, error: 'SIDECAR_ORIGIN_NOT_ALLOWED', reason: 'origin not allowed' })
})

t.test('*: any origin is echoed; a value that is not an origin is not', async t => {
  const { h } = await setUp(t, { CORS_ALLOWED_ORIGINS: '*', DISABLE_AUTH: 'true' })
  for (const origin of [OTHER, 'http://127.0.0.1:3000', 'null']) {
    const r = await send(`${h.base}/v4/proj/app/x`, { method: 'OPTIONS', headers: preflight(origin) })
    t.equal(r.status, 204, origin)
    t.equal(r.headers['access-control-allow-origin'], origin, `${origin}: its own origin, never *`)
  }
  const joined = await send(`${h.base}/v4/proj/app/x`, { method: 'OPTIONS', headers: preflight('https://a.example, https://b.example') })
  t.equal(joined.status, 403, 'two origins in one header')
})

t.test('unset: no CORS header anywhere, and OPTIONS is an ordinary call', async t => {
  const { app, h } = await setUp(t, {})
  const pre = await send(`${h.base}/v4/proj/app/x`, { method: 'OPTIONS', headers: preflight(PAGE) })
  t.equal(pre.status, 401, 'a preflight is a call like any other: no token, 401')
  t.same(corsOf(pre.headers), {})
  const call = await send(`${h.base}/v4/proj/app/x`, { headers: { origin: PAGE, authorization: `Bearer ${await h.token()}` } })
  t.equal(call.status, 200)
  t.same(corsOf(call.headers), {})

  const open = await setUp(t, { DISABLE_AUTH: 'true', RUNTIME: 'custom' }, json({ ok: true }, { 'access-control-allow-origin': '*' }))
  const passed = await send(`${open.h.base}/v4/proj/app/y`, { method: 'OPTIONS', headers: preflight(PAGE) })
  t.equal(passed.status, 200, 'the app answers the OPTIONS')
  t.equal(open.app.requests[0]?.method, 'OPTIONS')
  t.same(corsOf(passed.headers), { 'access-control-allow-origin': '*' }, 'the app\'s own CORS headers pass through unchanged')
  t.equal(app.requests.length, 1)
})
