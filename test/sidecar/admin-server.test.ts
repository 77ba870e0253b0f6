import t from 'tap'
import { eventually, startHarness, startTestServer } from '../helpers/sidecar-harness.ts'
import { send } from '../helpers/http-client.ts'

t.test('livez, healthz, readyz and metrics follow the app and the drain', async t => {
  let healthy = true
  const app = await startTestServer((req, res) => {
    if (req.url === '/ready') res.writeHead(healthy ? 200 : 503).end()
    else if (req.url === '/health') res.writeHead(healthy ? 204 : 500).end()
    else res.writeHead(200).end('ok')
  })
  const h = await startHarness(app.url, { READYCHECK_PATH: '/ready', HEALTHCHECK_PATH: '/health', DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await app.close() })

  t.same((await send(`${h.admin}/livez`)).json(), { status: 'ok' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  t.same((await send(`${h.admin}/readyz`)).json(), { status: 'ready', run_store: 'up' })
  t.equal((await send(`${h.admin}/healthz`)).status, 200)
  t.ok(app.requests.some(r => r.url === '/ready'), 'the ready path was probed over HTTP')
  t.ok(app.requests.some(r => r.url === '/health'), 'the health path was probed over HTTP')
  t.equal(app.requests.find(r => r.url === '/ready')?.headers['user-agent'], 'app-sidecar-probe')

  healthy = false
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 503)
  t.same((await send(`${h.admin}/readyz`)).json(), { message: 'app is not ready', run_store: 'up' })
  await eventually(async () => (await send(`${h.admin}/healthz`)).status === 503)
  t.same((await send(`${h.admin}/healthz`)).json(), { message: 'app is not healthy' })
  t.equal((await send(`${h.admin}/livez`)).status, 200, 'the sidecar itself stays live')

  healthy = true
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)

  const metrics = await send(`${h.admin}/metrics`)
  t.equal(metrics.status, 200)
  t.match(metrics.headers['content-type'], /^text\/plain; version=0\.0\.4/)
  for (const name of ['sidecar_requests_total', 'sidecar_request_duration_seconds', 'sidecar_inflight_requests', 'sidecar_queued_requests',
    'sidecar_sse_streams', 'sidecar_sse_events_total', 'sidecar_websocket_connections', 'sidecar_webhook_attempts_total',
    'sidecar_webhook_deliveries_total', 'process_cpu_seconds_total', 'process_resident_memory_bytes', 'nodejs_eventloop_lag_seconds']) {
    t.match(metrics.text, new RegExp(`^# TYPE ${name} `, 'm'), name)
  }
  t.match(metrics.text, /^sidecar_inflight_requests 0$/m)

  const drained = h.sidecar.drain(5)
  const readyz = await send(`${h.admin}/readyz`)
  t.equal(readyz.status, 503, 'readyz turns 503 at once on drain')
  t.same(readyz.json(), { message: 'draining', run_store: 'up' })
  t.equal(await drained, true)
})

t.test('unknown admin routes are 404 and writes are 405', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end() })
  const h = await startHarness(app.url)
  t.teardown(async () => { await h.close(); await app.close() })
  const missing = await send(`${h.admin}/v4/proj/app/run`)
  t.equal(missing.status, 404)
  t.same(missing.json(), { message: 'no such route' })
  const post = await send(`${h.admin}/readyz`, { method: 'POST' })
  t.equal(post.status, 405)
  t.equal(post.headers.allow, 'GET, HEAD')
})

t.test('without check paths the app is probed with a TCP connect', async t => {
  const app = await startTestServer((req, res) => { res.writeHead(200).end() })
  const h = await startHarness(app.url)
  t.teardown(async () => { await h.close() })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  t.equal((await send(`${h.admin}/healthz`)).status, 200)
  t.equal(app.requests.length, 0, 'a TCP probe sends no HTTP request')
  await app.close()
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 503)
  t.equal((await send(`${h.admin}/healthz`)).status, 503)
})
