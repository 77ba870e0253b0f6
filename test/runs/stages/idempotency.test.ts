import type { OutgoingHttpHeaders } from 'node:http'
import t from 'tap'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { receiverFor, runsAppFor, runsSidecarFor } from '../../helpers/runs-client.ts'
import { metric } from '../../helpers/admin-metrics.ts'
import { eventually, type Harness } from '../../helpers/sidecar-harness.ts'

const IN_PROGRESS = '{"message":"a request with this Idempotency-Key is in progress"}'
const REUSED = '{"message":"Idempotency-Key reused with a different body"}'
const MALFORMED = '{"message":"malformed Idempotency-Key: 1 to 255 visible ASCII characters, sent once"}'

function caller (h: Harness): (path: string, key: string | undefined, options?: { body?: string, headers?: OutgoingHttpHeaders, method?: string }) => Promise<SentResponse> {
  return async (path, key, options = {}) => await send(`${h.base}/v4/proj/app${path}`, {
    method: options.method ?? 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }), ...options.headers },
    body: options.body ?? '{"n":1}'
  })
}

t.test('sync: the first request runs; a repeat gets the same status, body and X-Request-Id, replayed, and the app is not called again', async t => {
  const app = await runsAppFor(t)
  for (const runtime of ['cortex', 'custom']) {
    const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: runtime })
    const call = caller(h)
    const key = `key-${runtime}`
    const first = await call('/json/one?q=1', key, { headers: { 'x-request-id': `first-${runtime}` } })
    t.equal(first.status, 200)
    t.equal(first.headers['idempotent-replayed'], undefined, 'the first is not a replay')
    const before = app.requests.length
    for (const headers of [{}, { 'x-request-id': 'another-id' }]) {
      const repeat = await call('/json/one?q=1', key, { headers })
      t.equal(repeat.status, 200, `${runtime}: same status`)
      t.same(repeat.body, first.body, `${runtime}: same body, byte for byte`)
      t.equal(repeat.headers['x-request-id'], `first-${runtime}`, `${runtime}: the first's X-Request-Id`)
      t.equal(repeat.headers['idempotent-replayed'], 'true')
      t.equal(repeat.headers['content-type'], first.headers['content-type'])
      t.equal(repeat.headers['content-length'], String(first.body.length))
    }
    t.equal(app.requests.length, before, `${runtime}: the app was not called again`)
  }
})

t.test('sync: a stream is replayed as the same SSE frames', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const call = caller(h)
  const pending = call('/ndjson', 'stream-key', { headers: { 'x-request-id': 'streamed' } })
  const held = await app.waitForHeld(1)
  held.res.write('{"token":"a"}\n')
  held.res.write('"b"\n')
  held.res.end('{"token":"c"}\n')
  const first = await pending
  t.equal(first.status, 200)
  t.equal(first.headers['content-type'], 'text/event-stream; charset=utf-8')
  const repeat = await call('/ndjson', 'stream-key')
  t.equal(repeat.status, 200)
  t.same(repeat.body, first.body, 'the same frames')
  t.equal(repeat.text, 'data: {"token":"a"}\n\ndata: "b"\n\ndata: {"token":"c"}\n\nid: streamed.done\n\n', 'what the first caller got, its done frame included')
  t.equal(repeat.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(repeat.headers['cache-control'], 'no-cache')
  t.equal(repeat.headers['x-request-id'], 'streamed')
  t.equal(repeat.headers['idempotent-replayed'], 'true')
  t.equal(app.requestsTo('/ndjson').length, 1)
})

t.test('sync: a repeat while the first runs is 409; another body is 422; another path or app is another key', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const call = caller(h)
  const first = call('/hold/x', 'busy', { body: '{"a":1}' })
  const held = await app.waitForHeld(1)
  const repeat = await call('/hold/x', 'busy', { body: '{"a":1}' })
  t.equal(repeat.status, 409)
  t.equal(repeat.text, IN_PROGRESS)
  const reused = await call('/hold/x', 'busy', { body: '{"a":2}' })
  t.equal(reused.status, 422)
  t.equal(reused.text, REUSED)
  const elsewhere = await call('/json/y', 'busy', { body: '{"a":2}' })
  t.equal(elsewhere.status, 200, 'the same key on another path runs')
  held.res.writeHead(201, { 'content-type': 'text/plain' }).end('made')
  t.equal((await first).status, 201)
  const replayed = await call('/hold/x', 'busy', { body: '{"a":1}' })
  t.equal(replayed.status, 201)
  t.equal(replayed.headers['idempotent-replayed'], 'true')
  t.equal((await call('/hold/x', 'busy', { body: '{"a":2}' })).status, 422, 'still 422 once answered')
  t.equal(app.requestsTo('/hold').length, 1, 'the app ran it once')
})

t.test('malformed keys are 400 (POST); other methods pass the header to the app untouched', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const call = caller(h)
  for (const key of ['a b', 'k'.repeat(256), 'é', '']) {
    const r = await send(`${h.base}/v4/proj/app/json`, { method: 'POST', headers: { 'idempotency-key': key }, body: '{}' })
    t.equal(r.status, 400, JSON.stringify(key).slice(0, 20))
    t.equal(r.text, MALFORMED)
  }
  t.equal(app.requests.length, 0, 'none reached the app')
  const get = await call('/json/get', 'a b', { method: 'GET', body: '' })
  t.equal(get.status, 200)
  t.equal(app.requests[0]?.headers['idempotency-key'], 'a b')
  t.equal((await call('/json/get', 'a b', { method: 'GET', body: '' })).headers['idempotent-replayed'], undefined, 'a GET is never replayed')
  t.equal(app.requests.length, 2)
})

t.test('a first request that never reached the app is not kept: 413, 503 queue full; the retry runs', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', QUEUE_DEPTH: '0', MAX_BODY_BYTES: '100' })
  const call = caller(h)
  t.equal((await call('/json/big', 'k413', { body: 'x'.repeat(101) })).status, 413)
  t.equal((await call('/json/big', 'k413', { body: 'x'.repeat(100) })).status, 200, 'the key was never claimed')

  const blocker = call('/hold/slot', undefined)
  const held = await app.waitForHeld(1)
  const refused = await call('/json/full', 'k503')
  t.equal(refused.status, 503)
  held.res.writeHead(200).end()
  await blocker
  await eventually(async () => (await call('/json/full', 'k503')).status === 200)
  t.equal(app.requestsTo('/json/full').length, 1, 'the retry ran, once')
  // a caller leaving: dropped-caller.test.ts (while it waits for a slot, freed; once it reached the app, kept)
})

t.test('async: a repeat gets the same 202, run id and Location, replayed; the app runs it once', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const call = caller(h)
  const first = await call('/json/async?async=true', 'async-key', { headers: { 'x-request-id': 'async-first' } })
  t.equal(first.status, 202)
  t.equal(first.text, '{"run_id":"async-first","status":"queued"}')
  const repeat = await call('/json/async?async=true', 'async-key', { headers: { 'x-request-id': 'async-second' } })
  t.equal(repeat.status, 202)
  t.equal(repeat.text, first.text)
  t.equal(repeat.headers['x-request-id'], 'async-first')
  t.equal(repeat.headers.location, '/v4/proj/app/_runs/async-first')
  t.equal(repeat.headers['idempotent-replayed'], 'true')
  t.equal((await call('/json/async?async=true', 'async-key', { body: '{"other":1}' })).status, 422)
  await eventually(async () => (await send(`${h.base}/v4/proj/app/_runs/async-first`)).json() !== undefined &&
    ((await send(`${h.base}/v4/proj/app/_runs/async-first`)).json() as { status: string }).status === 'succeeded')
  t.equal((await send(`${h.base}/v4/proj/app/_runs/async-second`)).status, 404, 'no second run was recorded')
  t.equal(app.requestsTo('/json/async').length, 1)
})

t.test('simultaneous first requests with one key: one runs, the others are 409 or its replay', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const call = caller(h)
  const answers = await Promise.all(Array.from({ length: 10 }, async () => await call('/json/race', 'race-key')))
  t.equal(app.requestsTo('/json/race').length, 1, 'the app ran it once')
  t.ok(answers.every(r => r.status === 200 || (r.status === 409 && r.text === IN_PROGRESS)), answers.map(r => r.status).join(' '))
  t.equal(answers.filter(r => r.status === 200 && r.headers['idempotent-replayed'] === undefined).length, 1, 'one first answer')
})

t.test('a sync call with a key is a recorded run: running while it runs (live events), then its record', async t => {
  const app = await runsAppFor(t)
  const receiver = await receiverFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const call = caller(h)
  const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
  const pending = call(`/ndjson?${hook}`, 'recorded-key', { headers: { 'x-request-id': 'recorded-sync', 'x-webhook-secret': 'whsec-x' } })
  const held = await app.waitForHeld(1)
  const running = (await send(`${h.base}/v4/proj/app/_runs/recorded-sync`)).json() as Record<string, unknown>
  t.equal(running.status, 'running')
  t.same(running.webhook, { status: 'pending', attempts: 0 })
  const events = fetch(`${h.base}/v4/proj/app/_runs/recorded-sync/events`).then(async r => await r.text())
  held.res.write('{"i":0}\n')
  held.res.end('{"i":1}\n')
  t.equal((await pending).status, 200)
  t.match(await events, /^id: 0\ndata: \{"i":0\}\n\nid: 1\ndata: \{"i":1\}\n\nid: recorded-sync\.done\nevent: done\ndata: \{"run_id":"recorded-sync","status":"succeeded"/)
  await receiver.waitForAttempts(1)
  await eventually(async () => ((await send(`${h.base}/v4/proj/app/_runs/recorded-sync`)).json() as { webhook: { status: string } }).webhook.status === 'delivered')
  const done = (await send(`${h.base}/v4/proj/app/_runs/recorded-sync`)).json() as Record<string, unknown>
  t.equal(done.status, 'succeeded')
  t.equal(done.status_code, 200)
  t.same(done.result, [{ i: 0 }, { i: 1 }])
  t.same(done.webhook, { status: 'delivered', attempts: 1 })
  t.notMatch(JSON.stringify(done), /whsec/, 'the secret is never in a record')

  const failed = await call('/status/500', 'failing-key', { headers: { 'x-request-id': 'recorded-500' } })
  t.equal(failed.status, 500)
  const record = (await send(`${h.base}/v4/proj/app/_runs/recorded-500`)).json() as Record<string, unknown>
  t.equal(record.status, 'failed')
  t.equal(record.status_code, 500)
  t.same(record.error, { message: 'app answered 500' })
  t.equal((await send(`${h.base}/v4/proj/app/_runs/no-key-call`)).status, 404, 'a plain call is not recorded')
  await call('/json/plain', undefined, { headers: { 'x-request-id': 'no-key-call' } })
  t.equal((await send(`${h.base}/v4/proj/app/_runs/no-key-call`)).status, 404, 'still not, once it ran')
})

t.test('a key expires with RUN_RETENTION_SECONDS: then the same request runs again', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUN_RETENTION_SECONDS: '1' })
  const call = caller(h)
  t.equal((await call('/json/expiring', 'short-lived')).status, 200)
  t.equal((await call('/json/expiring', 'short-lived')).headers['idempotent-replayed'], 'true')
  await eventually(async () => (await call('/json/expiring', 'short-lived')).headers['idempotent-replayed'] === undefined, 5000)
  t.equal(app.requestsTo('/json/expiring').length, 2, 'run again once the key expired, not before')
})

t.test('an answer over ENVELOPE_MAX_BODY_BYTES is not kept: its repeats get 409 "too large to keep", and the app is not called again', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom', ENVELOPE_MAX_BODY_BYTES: '64' })
  const call = caller(h)
  const first = await call('/json/large', 'big-answer', { body: JSON.stringify({ pad: 'x'.repeat(100) }) })
  t.equal(first.status, 200)
  t.ok(first.body.length > 64, `the caller got all ${first.body.length} bytes`)
  await eventually(async () => (await call('/json/large', 'big-answer', { body: JSON.stringify({ pad: 'x'.repeat(100) }) })).status === 409)
  const repeat = await call('/json/large', 'big-answer', { body: JSON.stringify({ pad: 'x'.repeat(100) }) })
  t.equal(repeat.text, '{"message":"the answer to this Idempotency-Key was too large to keep"}')
  t.equal(repeat.headers['idempotent-replayed'], 'true')
  t.equal(app.requestsTo('/json/large').length, 1)
})

t.test('sidecar_runs_total counts a recorded sync call once, as its run ends (a replay is no new run)', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom' })
  const call = caller(h)
  t.equal((await call('/json/counted', 'counted-ok')).status, 200)
  t.equal((await call('/status/500', 'counted-failed')).status, 500)
  t.equal((await call('/json/counted', 'counted-ok')).headers['idempotent-replayed'], 'true')
  await eventually(async () => await metric(h, 'sidecar_runs_total', { status: 'failed' }) === 1)
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'succeeded' }), 1, 'the first ran; its repeat was answered from the store')
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'failed' }), 1, 'the app\'s 500 ended its run failed')
  t.equal((await call('/json/plain', undefined)).status, 200)
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'succeeded' }), 1, 'a call without a key is no recorded run')
})
