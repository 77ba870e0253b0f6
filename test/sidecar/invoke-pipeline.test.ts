import { randomBytes } from 'node:crypto'
import t from 'tap'
import { type Harness, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { send } from '../helpers/http-client.ts'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/
const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

/** An app that answers by path: /json, /text, /empty, /status/<n>, /custom-headers, /echo, /hold, /reset, /204 */
async function startApp (): Promise<TestServer & { held: Array<{ closed: boolean }> }> {
  const held: Array<{ closed: boolean }> = []
  const app = await startTestServer((req, res, body) => {
    const path = (req.url as string).split('?')[0] as string
    if (path === '/json' || path === '/run') {
      res.writeHead(200, { 'content-type': 'application/json', 'x-app': 'yes', etag: '"abc"' }).end('{"answer": 42, "list": [1, "two"]}')
    } else if (path === '/text') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('plain words')
    } else if (path === '/empty') {
      res.writeHead(200).end()
    } else if (path.startsWith('/status/')) {
      res.writeHead(Number(path.slice(8)), { 'content-type': 'application/problem+json', 'x-app': 'yes' }).end('{"detail":"app said no"}')
    } else if (path === '/204') {
      res.writeHead(204, { 'x-app': 'yes' }).end()
    } else if (path === '/echo') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(body)
    } else if (path === '/reset') {
      req.socket.destroy()
    } else if (path === '/half') {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' })
      res.write('only part')
      setTimeout(() => req.socket.destroy(), 20)
    } else {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"app 404"}')
    }
  })
  return Object.assign(app, { held })
}

let app: Awaited<ReturnType<typeof startApp>>
let h: Harness
let token: string

t.before(async () => {
  app = await startApp()
  h = await startHarness(app.url, { MAX_BODY_BYTES: '1000' })
  token = await h.token('proj')
})
t.teardown(async () => {
  await h.close()
  await app.close()
})

const auth = (): Record<string, string> => ({ authorization: `Bearer ${token}` })
const last = () => app.requests[app.requests.length - 1] as TestServer['requests'][number]

t.test('cortex: a 2xx JSON body is wrapped in exactly run_id, result, run_time_ms, timestamp', async t => {
  const before = Date.now()
  const r = await send(`${h.base}/v4/proj/app/json`, { method: 'POST', headers: { ...auth(), 'content-type': 'application/json' }, body: '{"x":1}' })
  const callMs = Date.now() - before
  t.equal(r.status, 200)
  t.equal(r.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(r.headers['x-app'], 'yes', 'app headers are kept')
  t.equal(r.headers.etag, undefined, 'the app body etag no longer describes the body')
  t.equal(Number(r.headers['content-length']), r.body.length)
  const body = r.json() as Record<string, unknown>
  t.same(Object.keys(body), ['run_id', 'result', 'run_time_ms', 'timestamp'])
  t.match(body.run_id, UUID)
  t.equal(r.headers['x-request-id'], body.run_id)
  t.same(body.result, { answer: 42, list: [1, 'two'] })
  t.type(body.run_time_ms, 'number')
  // the app's time falls within the call's, however slow the machine (a ms of rounding)
  t.ok((body.run_time_ms as number) >= 0 && (body.run_time_ms as number) <= callMs + 1, `run_time_ms ${String(body.run_time_ms)} within the call's ${callMs} ms`)
  t.match(body.timestamp, ISO_UTC)
  t.ok(Date.parse(body.timestamp as string) >= before - 1)
  t.equal(last().headers['x-request-id'], body.run_id, 'the app got the same run id')
})

t.test('cortex: a non-JSON 2xx body becomes a string result; an empty one the empty string', async t => {
  const text = (await send(`${h.base}/v4/proj/app/text`, { headers: auth() })).json() as Record<string, unknown>
  t.equal(text.result, 'plain words')
  const empty = (await send(`${h.base}/v4/proj/app/empty`, { headers: auth() })).json() as Record<string, unknown>
  t.equal(empty.result, '')
})

t.test('cortex: non-2xx bodies and headers pass unchanged', async t => {
  for (const status of [400, 404, 422, 500, 503]) {
    const r = await send(`${h.base}/v4/proj/app/status/${status}`, { headers: auth() })
    t.equal(r.status, status)
    t.equal(r.text, '{"detail":"app said no"}')
    t.equal(r.headers['content-type'], 'application/problem+json')
    t.equal(r.headers['x-app'], 'yes')
    t.match(r.headers['x-request-id'], UUID)
  }
})

t.test('cortex: 204 and HEAD are not wrapped (they carry no body)', async t => {
  const r204 = await send(`${h.base}/v4/proj/app/204`, { headers: auth() })
  t.equal(r204.status, 204)
  t.equal(r204.body.length, 0)
  t.equal(r204.headers['x-app'], 'yes')
  const head = await send(`${h.base}/v4/proj/app/json`, { method: 'HEAD', headers: auth() })
  t.equal(head.status, 200)
  t.equal(head.body.length, 0)
  t.equal(last().method, 'HEAD')
})

t.test('every HTTP method is forwarded with its body streamed intact', async t => {
  for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
    const r = await send(`${h.base}/v4/proj/app/status/200`, { method, headers: auth() })
    t.equal(r.status, 200, method)
    t.equal(last().method, method)
  }
  const payload = randomBytes(900)
  const r = await send(`${h.base}/v4/proj/app/echo`, { method: 'POST', headers: { ...auth(), 'content-type': 'application/octet-stream' }, body: payload })
  const body = r.json() as { result: string }
  t.ok(last().body.equals(payload), 'the app got the exact bytes')
  t.equal(last().headers['content-length'], '900')
  t.equal(body.result, payload.toString('utf8'))
})

t.test('path and query mapping', async t => {
  const cases: Array<[string, string]> = [
    ['/v4/proj/app', '/'],
    ['/v4/proj/app/', '/'],
    ['/v4/proj/app/a/b/c', '/a/b/c'],
    ['/v4/proj/app/q?x=1&webhookEndpoint=http%3A%2F%2F127.0.0.1%3A9%2Fhook&y=two%20words&x=3', '/q?x=1&y=two%20words&x=3'],
    ['/v4/proj/app/q?webhookEndpoint=http%3A%2F%2F127.0.0.1%3A9', '/q'],
    ['/v4/proj/app/q?access_token=kept-when-not-allowed', '/q?access_token=kept-when-not-allowed'],
    ['/v4/proj/app/q?flag&empty=&enc%41=1', '/q?flag&empty=&enc%41=1'],
    ['/v4/proj/app/%7Euser/a%2Fb', '/%7Euser/a%2Fb']
  ]
  for (const [path, expected] of cases) {
    const r = await send(h.base + path, { headers: auth() })
    t.equal(r.status, 404, 'the test app answers 404 for unknown paths, passed through')
    t.equal(last().url, expected, path)
  }
})

t.test('run id: a valid caller X-Request-Id is kept, anything else replaced by a UUID', async t => {
  const kept = await send(`${h.base}/v4/proj/app/json`, { headers: { ...auth(), 'x-request-id': 'Run_1-abc' } })
  t.equal(kept.headers['x-request-id'], 'Run_1-abc')
  t.equal((kept.json() as { run_id: string }).run_id, 'Run_1-abc')
  t.equal(last().headers['x-request-id'], 'Run_1-abc')
  for (const bad of ['a.b', 'x'.repeat(129), 'with space', '../etc', 'é']) {
    const r = await send(`${h.base}/v4/proj/app/json`, { headers: { ...auth(), 'x-request-id': encodeURI(bad) === bad ? bad : encodeURIComponent(bad) } })
    t.match(r.headers['x-request-id'], UUID, bad)
    t.equal(last().headers['x-request-id'], r.headers['x-request-id'])
  }
  t.equal((await send(`${h.base}/v4/proj/app/json`, { headers: { ...auth(), 'x-request-id': 'x'.repeat(128) } })).headers['x-request-id'], 'x'.repeat(128))
  const error = await send(`${h.base}/v4/proj/app/json`, { headers: { 'x-request-id': 'err-run' } })
  t.equal(error.status, 401)
  t.equal(error.headers['x-request-id'], 'err-run', 'sidecar errors carry the run id too')
})

t.test('header rules: secrets and hop-by-hop headers never reach the app; X-Forwarded-* are set', async t => {
  await send(`${h.base}/v4/proj/app/json`, {
    headers: {
      ...auth(),
      'x-webhook-secret': 's3cret',
      connection: 'keep-alive, X-Drop-Me',
      'x-drop-me': 'named by Connection',
      'keep-alive': 'timeout=5',
      te: 'trailers',
      'proxy-authorization': 'Basic abc',
      'proxy-connection': 'keep-alive',
      'x-forwarded-for': '203.0.113.7',
      'x-custom': 'kept',
      accept: 'application/json',
      host: 'public.example:8443'
    }
  })
  const got = last().headers
  for (const name of ['authorization', 'x-webhook-secret', 'x-drop-me', 'keep-alive', 'te', 'trailer', 'proxy-authorization', 'proxy-connection']) {
    t.equal(got[name], undefined, `${name} is not forwarded`)
  }
  t.equal(got['x-custom'], 'kept')
  t.equal(got.accept, 'application/json')
  t.equal(got['x-forwarded-for'], '203.0.113.7, 127.0.0.1')
  t.equal(got['x-forwarded-proto'], 'http')
  t.equal(got['x-forwarded-host'], 'public.example:8443')
  t.equal(got.host, `127.0.0.1:${app.port}`, 'Host is the app')
  t.notOk(last().rawHeaders.some(v => v.includes('s3cret') || v.includes(token)), 'no secret in any header value')
})

t.test('a chunked request body streams to the app', async t => {
  const r = await send(`${h.base}/v4/proj/app/echo`, { method: 'POST', headers: { ...auth(), 'transfer-encoding': 'chunked' }, body: ['part one, ', 'part two'] })
  t.equal(r.status, 200)
  t.equal(last().body.toString(), 'part one, part two')
  t.equal(last().headers['transfer-encoding'], 'chunked')
})

t.test('413: a Content-Length over MAX_BODY_BYTES is refused before the app is called', async t => {
  const seen = app.requests.length
  const r = await send(`${h.base}/v4/proj/app/echo`, { method: 'POST', headers: { ...auth(), 'content-length': '1001' }, body: Buffer.alloc(1001) })
  t.equal(r.status, 413)
  t.same(r.json(), { message: 'request body exceeds 1000 bytes' })
  t.match(r.headers['x-request-id'], UUID)
  t.equal(app.requests.length, seen, 'the app was not called')
  const exact = await send(`${h.base}/v4/proj/app/echo`, { method: 'POST', headers: auth(), body: Buffer.alloc(1000, 1) })
  t.equal(exact.status, 200, 'exactly the limit passes')
})

t.test('413: a chunked body is cut when it passes the limit', async t => {
  const seen = app.requests.length
  const r = await send(`${h.base}/v4/proj/app/echo`, { method: 'POST', headers: auth(), body: [Buffer.alloc(600), Buffer.alloc(600)] })
  t.equal(r.status, 413)
  t.same(r.json(), { message: 'request body exceeds 1000 bytes' })
  // its copy may have reached the app, cut; a later call that reaches the app whole shows the sidecar moved on
  t.equal((await send(`${h.base}/v4/proj/app/json`, { headers: auth() })).status, 200)
  t.same(app.requests.slice(seen).filter(entry => entry.complete).map(entry => entry.url), ['/json'], 'the app never received a complete request')
})

t.test('400: an invalid Content-Length is a malformed request', async t => {
  const { sendRaw } = await import('../helpers/http-client.ts')
  const raw = await sendRaw(h.sidecar.port, `POST /v4/proj/app/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Length: abc\r\n\r\n`)
  t.match(raw, /^HTTP\/1\.1 400 /)
})

t.test('502: the app resetting or failing mid-response', async t => {
  const reset = await send(`${h.base}/v4/proj/app/reset`, { headers: auth() })
  t.equal(reset.status, 502)
  t.same(reset.json(), { message: 'app unreachable: connection reset' })
  t.match(reset.headers['x-request-id'], UUID)
  const half = await send(`${h.base}/v4/proj/app/half`, { headers: auth() })
  t.equal(half.status, 502, 'cortex buffers, so a body cut short is still a clean 502')
  t.match((half.json() as { message: string }).message, /^app unreachable/)
})

t.test('unknown routes and apps get a JSON 404', async t => {
  for (const path of ['/', '/v3/proj/app/run', '/v4', '/v4/', '/v4/proj', '/v4//app/run', '/v4/../app/x', '/v4/proj/.hidden/x', '/v4/proj/a%2Fb/x', '/v4/' + 'p'.repeat(129) + '/app']) {
    const r = await send(h.base + path, { headers: auth() })
    t.equal(r.status, 404, path)
    t.same(r.json(), { message: path.startsWith('/v4/') ? 'no such app' : 'no such route' }, path)
    t.match(r.headers['x-request-id'], UUID)
  }
  t.equal(app.requests.some(r => r.url.includes('hidden') || r.url.includes('..')), false, 'none reached the app')
})
