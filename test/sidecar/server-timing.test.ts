import t from 'tap'
import { fetchMetrics, sampleValue } from '../helpers/admin-metrics.ts'
import { send, sendRaw } from '../helpers/http-client.ts'
import { eventually } from '../helpers/sidecar-harness.ts'
import { gaugesReach, invoke, json, type SeenRequest, sidecarFor, startMixedApp } from './concurrency-kit.ts'

// docs/tracing.md, "Server-Timing and metrics": every /v4 answer the app gave carries
// `Server-Timing: queue;dur=<ms>`, and where the headers go out after the app's last byte (the
// cortex envelope) also `app;dur=<ms>`; the wait for a slot is the histogram
// sidecar_queue_duration_seconds.

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
  // the wait counts from the second call's arrival, the gauges' polling included: on a loaded machine past 100 ms
  t.equal(sampleValue(metrics, 'sidecar_queue_duration_seconds_bucket', { le: '0.1' }), ms <= 100 ? 2 : 1, 'the 0.1 s bucket holds the wait when it was that short')
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

t.test('the names queue and app are the sidecar\'s: the app\'s entries of those names are dropped, its others kept first', async t => {
  // the app's Server-Timing, as raw header lines (a repeated header, a quoted comma, any case, odd spacing)
  const spoofs: Record<string, string[]> = {
    '/only': ['queue;dur=0, app;dur=1'],
    '/mixed': ['db;dur=5, queue;dur=0', 'APP;dur=1 , cache;desc="hit, app;dur=9";dur=2', ' Queue ;dur=7,,total;dur=3'],
    '/prefix': ['queued;dur=4, application;dur=5']
  }
  const app = await startMixedApp(seen => {
    const lines = spoofs[seen.path.replace(/^\/(cortex|custom)/, '')] ?? []
    const head = ['content-type', 'application/json']
    for (const line of lines) head.push('server-timing', line)
    seen.res.writeHead(200, head)
    seen.res.end('{"ok":true}')
  })
  t.teardown(() => app.close())
  const custom = await sidecarFor(t, app.url, { RUNTIME: 'custom' })
  const cortex = await sidecarFor(t, app.url)
  for (const h of [custom, cortex]) await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  /** The Server-Timing lines of a raw answer, exactly as sent. */
  const timingLines = async (h: typeof custom, path: string): Promise<string[]> => {
    const raw = await sendRaw(h.sidecar.port, `GET /v4/proj/app${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
    t.match(raw, /^HTTP\/1\.1 200 /, `${path} answered 200`)
    return raw.slice(0, raw.indexOf('\r\n\r\n')).split('\r\n').filter(line => /^server-timing:/i.test(line))
  }
  t.same(await timingLines(custom, '/custom/only'), ['server-timing: queue;dur=0'], 'passthrough: only the sidecar\'s queue')
  t.same(await timingLines(custom, '/custom/mixed'), ['server-timing: db;dur=5, cache;desc="hit, app;dur=9";dur=2, total;dur=3, queue;dur=0'],
    'passthrough: the app\'s other entries first, in order, then the sidecar\'s')
  t.same(await timingLines(custom, '/custom/prefix'), ['server-timing: queued;dur=4, application;dur=5, queue;dur=0'], 'names that only start like ours are the app\'s')
  const [envelope] = await timingLines(cortex, '/cortex/mixed')
  t.match(envelope, /^server-timing: db;dur=5, cache;desc="hit, app;dur=9";dur=2, total;dur=3, queue;dur=0, app;dur=\d+(\.\d+)?$/, 'envelope: queue and app once each, the sidecar\'s')
  const [only] = await timingLines(cortex, '/cortex/only')
  t.match(only, /^server-timing: queue;dur=0, app;dur=\d+(\.\d+)?$/)
})
