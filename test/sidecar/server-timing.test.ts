import t from 'tap'
import { fetchMetrics, sampleValue } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { eventually } from '../helpers/sidecar-harness.ts'
import { gaugesReach, invoke, json, type SeenRequest, sidecarFor, startMixedApp } from './concurrency-kit.ts'

// SPEC, Tracing: every /v4 answer the app gave carries `Server-Timing: queue;dur=<ms>`, and where
// the headers go out after the app's last byte (the cortex envelope) also `app;dur=<ms>`; the
// wait for a slot is the histogram sidecar_queue_duration_seconds.

const QUEUE = /^queue;dur=(\d+(?:\.\d+)?)$/

t.test('cortex envelope: queue;dur=0 for a free slot, app;dur the envelope\'s own run_time_ms', async t => {
  const app = await startMixedApp(seen => { json(seen.res, { ok: true }) })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url)
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const response = await invoke(h, '/work', 'st-1')
  t.equal(response.status, 200)
  const envelope = response.json() as { run_time_ms: number }
  t.equal(response.headers['server-timing'], `queue;dur=0, app;dur=${envelope.run_time_ms}`)
  const metrics = await fetchMetrics(h.admin)
  t.equal(sampleValue(metrics, 'sidecar_queue_duration_seconds_count'), 1, 'one call took a slot')
  t.equal(sampleValue(metrics, 'sidecar_queue_duration_seconds_sum'), 0)
  t.equal(sampleValue(metrics, 'sidecar_queue_duration_seconds_bucket', { le: '0.0005' }), 1)
})

t.test('a queued call: its wait for the slot, in the header and the histogram', async t => {
  const held: SeenRequest[] = []
  const app = await startMixedApp(seen => {
    if (seen.id === 'first') held.push(seen)
    else json(seen.res, { id: seen.id })
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1', RUNTIME: 'custom' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const first = invoke(h, '/work', 'first')
  await eventually(() => held.length === 1)
  const sentAt = performance.now()
  const second = invoke(h, '/work', 'second')
  await gaugesReach(h, { inflight: 1, queued: 1 })
  await new Promise(resolve => setTimeout(resolve, 60))
  json((held[0] as SeenRequest).res, { id: 'first' })
  const [one, two] = await Promise.all([first, second])
  const tookMs = performance.now() - sentAt
  t.equal(one.headers['server-timing'], 'queue;dur=0', 'the first had a free slot')
  const waited = QUEUE.exec(String(two.headers['server-timing']))
  t.ok(waited !== null, `queue;dur=<ms>: ${String(two.headers['server-timing'])}`)
  const ms = Number(waited?.[1])
  t.ok(ms >= 60 && ms <= tookMs, `waited ${ms} ms: at least the 60 ms the slot was held, at most the call's ${tookMs.toFixed(1)} ms`)
  const metrics = await fetchMetrics(h.admin)
  t.equal(sampleValue(metrics, 'sidecar_queue_duration_seconds_count'), 2)
  t.ok(Math.abs((sampleValue(metrics, 'sidecar_queue_duration_seconds_sum') as number) - ms / 1000) < 1e-9, 'the sum is the one wait')
  t.equal(sampleValue(metrics, 'sidecar_queue_duration_seconds_bucket', { le: '0.05' }), 1, 'the wait is over 50 ms')
  t.equal(sampleValue(metrics, 'sidecar_queue_duration_seconds_bucket', { le: '0.1' }), 2)
})

t.test('passthrough keeps the app\'s own Server-Timing first; a stream gets queue too', async t => {
  const app = await startMixedApp(seen => {
    if (seen.path.startsWith('/stream')) {
      seen.res.writeHead(200, { 'content-type': 'text/event-stream' })
      seen.res.end('data: one\n\n')
      return
    }
    seen.res.writeHead(200, { 'content-type': 'text/plain', 'server-timing': 'db;dur=5, cache;desc="hit"' })
    seen.res.end('plain')
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { RUNTIME: 'custom' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const plain = await invoke(h, '/plain', 'p-1')
  t.equal(plain.body.toString(), 'plain')
  t.equal(plain.headers['server-timing'], 'db;dur=5, cache;desc="hit", queue;dur=0')
  const stream = await invoke(h, '/stream', 's-1')
  t.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(stream.headers['server-timing'], 'queue;dur=0')
})

t.test('answers the app did not give carry no Server-Timing', async t => {
  const app = await startMixedApp(seen => { seen.req.socket.destroy() })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url)
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const unreachable = await invoke(h, '/work', 'u-1')
  t.equal(unreachable.status, 502, 'the app cut the connection')
  t.equal(unreachable.headers['server-timing'], undefined)
  const missing = await send(`${h.base}/v9/proj/app/x`)
  t.equal(missing.status, 404)
  t.equal(missing.headers['server-timing'], undefined)
})
