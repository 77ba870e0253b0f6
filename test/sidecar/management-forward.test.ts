import t from 'tap'
import { startHarness, startTestServer } from '../helpers/sidecar-harness.ts'
import { patient } from '../helpers/timing.ts'
import { send } from '../helpers/http-client.ts'

t.test('GET and HEAD /v2/… are forwarded unchanged to STORE_URL; the store answer comes back as is', async t => {
  const store = await startTestServer((req, res) => {
    if ((req.url as string).includes('missing')) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"no such build"}')
      return
    }
    res.writeHead(200, { 'content-type': 'application/json', 'x-store': '1' }).end('{"id":"b1","status":"ready"}')
  })
  const app = await startTestServer((req, res) => { res.writeHead(200).end() })
  const h = await startHarness(app.url, { STORE_URL: store.url, DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await store.close(); await app.close() })

  const path = '/v2/projects/p1/apps/a1/builds/b1?expand=all&x=%2F'
  const r = await send(h.base + path, { headers: { authorization: 'Bearer store-token', 'x-request-id': 'mgmt-1' } })
  t.equal(r.status, 200)
  t.equal(r.text, '{"id":"b1","status":"ready"}')
  t.equal(r.headers['x-store'], '1')
  t.equal(r.headers['x-request-id'], 'mgmt-1')
  t.equal(store.requests[0]?.url, path, 'same path and query')
  t.equal(store.requests[0]?.headers.authorization, 'Bearer store-token', 'Authorization is passed on')
  t.equal(store.requests[0]?.method, 'GET')

  const missing = await send(`${h.base}/v2/projects/p1/apps/a1/builds/missing`)
  t.equal(missing.status, 404)
  t.same(missing.json(), { message: 'no such build' })

  const head = await send(h.base + path, { method: 'HEAD' })
  t.equal(head.status, 200)
  t.equal(head.body.length, 0)
  t.equal(store.requests[2]?.method, 'HEAD')
  t.equal(app.requests.length, 0, 'the app is never involved')
})

t.test('other methods on /v2 get 405 with Allow; the store is not called', async t => {
  const store = await startTestServer((req, res) => { res.writeHead(200).end() })
  const h = await startHarness(store.url, { STORE_URL: store.url, DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await store.close() })
  for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
    const r = await send(`${h.base}/v2/projects/p1/service-accounts`, { method, body: '{}' })
    t.equal(r.status, 405, method)
    t.equal(r.headers.allow, 'GET, HEAD')
    t.same(r.json(), { message: 'method not allowed' })
  }
  t.equal(store.requests.length, 0)
})

t.test('store unreachable: 502 with a JSON body', async t => {
  const store = await startTestServer((req, res) => { res.writeHead(200).end() })
  await store.close()
  const h = await startHarness(store.url, { STORE_URL: store.url, DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close() })
  const r = await send(`${h.base}/v2/projects/p1/apps/a1/builds/b1`)
  t.equal(r.status, 502)
  t.same(r.json(), { message: 'build store unreachable: connection refused' })
  const metrics = await send(`${h.admin}/metrics`)
  t.match(metrics.text, /^sidecar_requests_total\{route="management",code="502"\} 1$/m)
})

t.test('a STORE_URL with a path prefix keeps it', async t => {
  const store = await startTestServer((req, res) => { res.writeHead(200).end('{}') })
  const h = await startHarness(store.url, { STORE_URL: `${store.url}/store`, DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await store.close() })
  await send(`${h.base}/v2/projects`)
  t.equal(store.requests[0]?.url, '/store/v2/projects')
})

t.test('a store that never answers: 502 after the store time-out, not a hang', async t => {
  const store = await startTestServer(() => { /* never answers */ })
  const h = await startHarness(store.url, { STORE_URL: store.url, DISABLE_AUTH: 'true' }, { storeTimeoutMs: 300 })
  t.teardown(async () => { await h.close(); await store.close() })
  const started = Date.now()
  const r = await send(`${h.base}/v2/projects/p1/apps/a1/builds/b1`)
  t.equal(r.status, 502)
  t.same(r.json(), { message: 'build store unreachable: response headers timeout' })
  // the 300 ms store time-out answered, not the default 30 s one, far past the scaled bound
  t.ok(Date.now() - started < patient(5000), 'answered after the time-out set, not the default 30 s')
})
