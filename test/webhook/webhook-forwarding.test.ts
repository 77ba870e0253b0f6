import { performance } from 'node:perf_hooks'
import t from 'tap'
import { verifyWebhook } from '../../src/index.ts'
import { eventually, freePort, type Harness, type LogLine, type TestServer } from '../helpers/sidecar-harness.ts'
import { send } from '../helpers/http-client.ts'
import { type ReceivedAttempt, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { clientClosed, connectClient, nextMessage, startWebSocketApp } from '../helpers/websocket-app.ts'
import {
  call, deliveriesFinished, ENVELOPE_KEYS, invokePath, ISO_UTC, linesWith, LOOPBACK_ENV, pythonSignature, sidecarFor,
  startWebhookApp, webhookCounts
} from './webhook-kit.ts'

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

let app: TestServer
let receiver: WebhookReceiver
let h: Harness
let runs = 0

t.before(async () => {
  app = await startWebhookApp()
  receiver = await startWebhookReceiver([], 200)
  h = await sidecarFor(t, app.url, LOOPBACK_ENV)
})
t.teardown(async () => {
  await receiver.close()
  await app.close()
})

const hook = (r: WebhookReceiver = receiver): string => `${r.url}/hook`
const newRunId = (): string => `fwd-${++runs}`

/** The deliveries a receiver got for one run id (waits for at least `n`). */
async function deliveriesOf (r: WebhookReceiver, runId: string, n = 1): Promise<ReceivedAttempt[]> {
  const mine = (): ReceivedAttempt[] => r.attempts.filter(a => a.headers['x-request-id'] === runId)
  await eventually(() => mine().length >= n, 10_000)
  return mine()
}

/** Calls `path` with a webhook to the shared receiver; returns the caller's response and the parsed delivery. */
async function roundTrip (path: string, headers: Record<string, string> = {}, sidecar: Harness = h, body = '{}'):
Promise<{ response: Awaited<ReturnType<typeof call>>, delivery: Record<string, unknown>, attempt: ReceivedAttempt, runId: string, before: number, after: number }> {
  const runId = newRunId()
  const before = Date.now()
  const response = await call(sidecar, path, hook(), { headers: { 'x-request-id': runId, ...headers }, body })
  const [attempt] = await deliveriesOf(receiver, runId)
  const after = Date.now()
  const delivery = JSON.parse((attempt as ReceivedAttempt).body.toString()) as Record<string, unknown>
  return { response, delivery, attempt: attempt as ReceivedAttempt, runId, before, after }
}

function checkEnvelope (t: Tap, trip: Awaited<ReturnType<typeof roundTrip>>, status: number, result: unknown, why: string): void {
  const { delivery, runId } = trip
  t.same(Object.keys(delivery), ENVELOPE_KEYS, `${why}: exactly the five keys, in order`)
  t.equal(delivery.run_id, runId, `${why}: run_id`)
  t.equal(trip.attempt.headers['x-request-id'], runId, `${why}: X-Request-Id is the run id`)
  t.equal(trip.attempt.headers['content-type'], 'application/json', `${why}: Content-Type`)
  t.equal(trip.attempt.method, 'POST')
  t.equal(delivery.status_code, status, `${why}: status_code`)
  t.same(delivery.result, result, `${why}: result`)
  t.type(delivery.run_time_ms, 'number', `${why}: run_time_ms is a number`)
  // within the time the test saw the call and its delivery take (+1: Date.now() counts whole ms)
  t.ok((delivery.run_time_ms as number) >= 0 && (delivery.run_time_ms as number) <= trip.after - trip.before + 1, `${why}: run_time_ms in range`)
  t.match(delivery.timestamp, ISO_UTC, `${why}: timestamp is ISO 8601 UTC`)
  const at = Date.parse(delivery.timestamp as string)
  t.ok(at >= trip.before - 5 && at <= trip.after + 5, `${why}: timestamp is now`)
  t.notOk('truncated' in delivery, `${why}: no "truncated" key`)
}

t.test('envelope: a JSON response, wrapped for the caller, is delivered with its status and parsed result', async t => {
  const trip = await roundTrip('/json')
  checkEnvelope(t, trip, 200, { answer: 42, list: [1, 'two'] }, 'json')
  const callerBody = trip.response.json() as Record<string, unknown>
  t.equal(trip.response.status, 200)
  t.same(Object.keys(callerBody), ['run_id', 'result', 'run_time_ms', 'timestamp'], 'the caller\'s body is unchanged in shape')
  t.equal(callerBody.run_id, trip.runId)
  t.same(callerBody.result, trip.delivery.result)
  t.equal(trip.response.headers['x-request-id'], trip.runId)
  t.equal(new URL(`http://x${app.requests.at(-1)?.url ?? ''}`).search, '', 'webhookEndpoint was not forwarded to the app')

  const get = await roundTrip('/json?x=1', {}, h)
  checkEnvelope(t, get, 200, { answer: 42, list: [1, 'two'] }, 'any method, other parameters kept')
  t.equal(app.requests.at(-1)?.url, '/json?x=1')
})

t.test('envelope: text, non-2xx statuses with their bodies', async t => {
  checkEnvelope(t, await roundTrip('/text'), 200, 'plain words', 'text')
  for (const status of [400, 404, 422, 500, 503]) {
    const trip = await roundTrip(`/status/${status}`)
    t.equal(trip.response.status, status, `the caller got ${status}`)
    t.equal(trip.response.text, '{"detail":"app said no"}', 'the caller\'s body is the app\'s, unchanged')
    checkEnvelope(t, trip, status, { detail: 'app said no' }, `app ${status}`)
  }
  checkEnvelope(t, await roundTrip('/nowhere'), 404, { message: 'app 404' }, 'the app\'s own 404')
})

t.test('envelope: streamed responses give the array of event values, in order, JSON parsed', async t => {
  const ndjson = await roundTrip('/ndjson')
  t.equal(ndjson.response.headers['content-type'], 'text/event-stream; charset=utf-8')
  checkEnvelope(t, ndjson, 200, [{ n: 1 }, 'two', 'plain text', [3]], 'NDJSON (blank lines are no events)')

  const sse = await roundTrip('/sse', { accept: 'text/event-stream' })
  t.equal(sse.response.headers['content-type'], 'text/event-stream; charset=utf-8')
  checkEnvelope(t, sse, 200, [{ n: 1 }, 'hello', 'line1\nline2'], 'SSE passthrough (comments are no events)')

  const bom = await roundTrip('/sse-bom', { accept: 'text/event-stream' })
  t.same(bom.response.body.subarray(0, 20), Buffer.from('\ufeffdata: first\n\ndata'), 'the caller gets the bytes as sent, the mark included')
  checkEnvelope(t, bom, 200, ['first', 'second'], 'a byte order mark before the first event is skipped, as an EventSource does')

  const chunks = await roundTrip('/chunks', { accept: 'text/event-stream' })
  t.equal(chunks.response.headers['content-type'], 'text/event-stream; charset=utf-8')
  checkEnvelope(t, chunks, 200, [{ n: 1 }, 'text chunk', [1, 2]], 'chunks for a caller accepting SSE')

  const plain = await roundTrip('/chunks')
  checkEnvelope(t, plain, 200, '{"n":1}text chunk[1,2]', 'the same chunks without Accept: text/event-stream are one body')
})

t.test('envelope: the app cut mid-stream reports status 200 and the events sent', async t => {
  const trip = await roundTrip('/cut')
  t.equal(trip.response.status, 200)
  t.match(trip.response.text, /event: error\ndata: \{"message":/, 'the caller saw the error event')
  checkEnvelope(t, trip, 200, [{ n: 1 }, 'two'], 'cut stream')
})

t.test('envelope: the app unreachable (502) reports 502 with the error body', async t => {
  const trip = await roundTrip('/reset')
  t.equal(trip.response.status, 502)
  const message = (trip.response.json() as { message: string }).message
  t.match(message, /^app unreachable/)
  checkEnvelope(t, trip, 502, { message }, 'reset before the response')
})

t.test('envelope: the app down altogether (502 connection refused) is reported too', async t => {
  const gone = await startWebhookApp()
  const sidecar = await sidecarFor(t, gone.url, LOOPBACK_ENV)
  t.equal((await call(sidecar, '/json', undefined)).status, 200, 'the app was ready')
  await gone.close()
  const trip = await roundTrip('/json', {}, sidecar)
  t.equal(trip.response.status, 502)
  checkEnvelope(t, trip, 502, trip.response.json(), 'app gone')
})

t.test('envelope: past WEBHOOK_MAX_BODY_BYTES, "result": null and "truncated": true; the caller gets everything', async t => {
  const small = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_MAX_BODY_BYTES: '100' })
  const fits = await roundTrip('/big?n=100', {}, small)
  checkEnvelope(t, fits, 200, 'x'.repeat(98), 'exactly 100 bytes')

  const over = await roundTrip('/big?n=101', {}, small)
  t.equal((over.response.json() as { result: string }).result, 'x'.repeat(99), 'the caller\'s response is whole')
  t.same(Object.keys(over.delivery), [...ENVELOPE_KEYS, 'truncated'])
  t.equal(over.delivery.result, null)
  t.equal(over.delivery.truncated, true)
  t.equal(over.delivery.status_code, 200)
  t.equal(over.delivery.run_id, over.runId)

  const streamFits = await roundTrip('/bigstream?n=40', {}, small)
  checkEnvelope(t, streamFits, 200, ['y'.repeat(40), 'z'.repeat(40)], 'a stream within the limit')
  const streamOver = await roundTrip('/bigstream?n=60', {}, small)
  t.match(streamOver.response.text, /z{60}/, 'the caller got every event')
  t.same(Object.keys(streamOver.delivery), [...ENVELOPE_KEYS, 'truncated'])
  t.equal(streamOver.delivery.result, null)
  t.equal(streamOver.delivery.truncated, true)
})

t.test('envelope: RUNTIME=custom delivers the same envelope; the caller gets the app\'s body as is', async t => {
  const custom = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, RUNTIME: 'custom' })
  const json = await roundTrip('/json', {}, custom)
  t.equal(json.response.text, '{"answer": 42, "list": [1, "two"]}', 'no cortex wrapping for the caller')
  checkEnvelope(t, json, 200, { answer: 42, list: [1, 'two'] }, 'custom json')
  checkEnvelope(t, await roundTrip('/text', {}, custom), 200, 'plain words', 'custom text')
  checkEnvelope(t, await roundTrip('/status/422', {}, custom), 422, { detail: 'app said no' }, 'custom 422')
  checkEnvelope(t, await roundTrip('/ndjson', {}, custom), 200, [{ n: 1 }, 'two', 'plain text', [3]], 'custom NDJSON')
  checkEnvelope(t, await roundTrip('/reset', {}, custom), 502, { message: 'app unreachable: connection reset' }, 'custom 502')
})

t.test('calls refused before the app send no webhook', async t => {
  const quiet = await startWebhookReceiver([200])
  t.teardown(() => quiet.close())
  const guarded = await sidecarFor(t, app.url, { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', PROJECT_ID: 'proj', MAX_BODY_BYTES: '100' })
  const token = await guarded.token('proj')
  const other = await guarded.token('other')
  const endpoint = encodeURIComponent(hook(quiet))
  const before = app.requests.length
  const cases: Array<[number, string, Record<string, string>, string | string[]]> = [
    [400, `/v4/proj/app/json?webhookEndpoint=${encodeURIComponent(`http://user@127.0.0.1:${quiet.port}/hook`)}`, { authorization: `Bearer ${token}` }, '{}'],
    [401, `/v4/proj/app/json?webhookEndpoint=${endpoint}`, {}, '{}'],
    [401, `/v4/proj/app/json?webhookEndpoint=${endpoint}`, { authorization: 'Bearer not-a-jwt' }, '{}'],
    [403, `/v4/proj/app/json?webhookEndpoint=${endpoint}`, { authorization: `Bearer ${other}` }, '{}'],
    [404, `/v4/elsewhere/app/json?webhookEndpoint=${endpoint}`, { authorization: `Bearer ${token}` }, '{}'],
    [413, `/v4/proj/app/json?webhookEndpoint=${endpoint}`, { authorization: `Bearer ${token}` }, 'x'.repeat(101)]
  ]
  for (const [status, path, headers, body] of cases) {
    const r = await send(guarded.base + path, { method: 'POST', headers: { ...headers, 'x-webhook-secret': 'whsec_x' }, body })
    t.equal(r.status, status, `${status} ${path.slice(0, 40)}`)
    t.same(Object.keys(r.json() as object), ['message'])
  }
  const chunked = await send(guarded.base + `/v4/proj/app/echo?webhookEndpoint=${endpoint}`, {
    method: 'POST', headers: { authorization: `Bearer ${token}` }, body: ['x'.repeat(60), 'y'.repeat(60)]
  })
  t.equal(chunked.status, 413, 'a chunked body over the limit is cut with 413')
  t.equal(app.requests.slice(before).filter(r => r.complete).length, 0, 'the app saw none of them whole')
  t.same(app.requests.slice(before).filter(r => !r.url.startsWith('/echo')), [], 'and those refused before the body not even in part')
  // each has its access line once the sidecar is done with it: a webhook handed over would then be pending or counted
  await eventually(() => linesWith(guarded.logs, 'request').length === cases.length + 1)
  t.equal(guarded.sidecar.webhooks.pending, 0, 'no webhook pending')
  t.equal(quiet.connections(), 0, 'the receiver got nothing')
  t.same(await webhookCounts(guarded), { attempts: {}, deliveries: {} })
  t.equal(linesWith(guarded.logs, 'webhook failed').length, 0)

  const ok = await send(guarded.base + `/v4/proj/app/json?webhookEndpoint=${endpoint}`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: '{}' })
  t.equal(ok.status, 200, 'with everything right, the same endpoint does get its webhook')
  await quiet.waitForAttempts(1)
})

t.test('signing: each attempt carries a fresh timestamp and a v1 signature Python agrees with', async t => {
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
  const flaky = await startWebhookReceiver([404, 200])
  t.teardown(() => flaky.close())
  const runId = newRunId()
  const sentAt = Math.floor(Date.now() / 1000)
  const r = await call(h, '/unicode', hook(flaky), { headers: { 'x-request-id': runId, 'x-webhook-secret': secret } })
  t.equal(r.status, 200)
  const attempts = await deliveriesOf(flaky, runId, 2)
  t.equal(attempts.length, 2)
  for (const [i, attempt] of attempts.entries()) {
    const timestamp = attempt.headers['x-service-webhook-timestamp'] as string
    const signature = attempt.headers['x-service-webhook-signature'] as string
    t.match(timestamp, /^\d{10}$/, `attempt ${i + 1}: unix seconds`)
    // between the call and now, however long the attempts took
    t.ok(Number(timestamp) >= sentAt && Number(timestamp) <= Math.ceil(Date.now() / 1000), `attempt ${i + 1}: timestamp is now`)
    t.match(signature, /^v1,[0-9a-f]{64}$/, `attempt ${i + 1}: v1,<64 lowercase hex>`)
    t.equal(signature.slice(3), pythonSignature(secret, runId, timestamp, attempt.body), `attempt ${i + 1}: Python's HMAC agrees`)
    t.equal(verifyWebhook(secret, attempt.headers, attempt.body), true, `attempt ${i + 1}: verifyWebhook (Buffer)`)
    t.equal(verifyWebhook(secret, attempt.headers, attempt.body.toString('utf8')), true, `attempt ${i + 1}: verifyWebhook (string)`)
    t.equal(verifyWebhook('whsec_other', attempt.headers, attempt.body), false)
    t.equal(attempt.headers['x-request-id'], runId)
  }
  t.ok((attempts[0] as ReceivedAttempt).body.equals((attempts[1] as ReceivedAttempt).body), 'the same body both times')
  t.same((JSON.parse((attempts[0] as ReceivedAttempt).body.toString()) as { result: unknown }).result, { greeting: 'héllo ✓ 😀', n: 1 })
})

t.test('signing: a retry a second later is signed afresh', async t => {
  const secret = 'whsec_fresh'
  const slow = await startWebhookReceiver(['hang', 200])
  t.teardown(() => slow.close())
  const sidecar = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_TIMEOUT_MS: '1100' })
  const runId = newRunId()
  await call(sidecar, '/json', hook(slow), { headers: { 'x-request-id': runId, 'x-webhook-secret': secret } })
  const [first, second] = await deliveriesOf(slow, runId, 2) as [ReceivedAttempt, ReceivedAttempt]
  const [ts1, ts2] = [first.headers['x-service-webhook-timestamp'] as string, second.headers['x-service-webhook-timestamp'] as string]
  t.ok(Number(ts2) > Number(ts1), `the second timestamp (${ts2}) is later than the first (${ts1})`)
  t.not(second.headers['x-service-webhook-signature'], first.headers['x-service-webhook-signature'], 'a new signature')
  t.ok(first.body.equals(second.body), 'over the same body')
  for (const attempt of [first, second]) {
    const ts = attempt.headers['x-service-webhook-timestamp'] as string
    t.equal((attempt.headers['x-service-webhook-signature'] as string).slice(3), pythonSignature(secret, runId, ts, attempt.body))
  }
  await eventually(async () => await deliveriesFinished(sidecar) === 1)
  t.same(await webhookCounts(sidecar), { attempts: { timeout: 1, '2xx': 1 }, deliveries: { delivered: 1 } })
})

t.test('signing: WEBHOOK_HEADER_BRAND=Acme names the headers x-acme-webhook-*', async t => {
  const acme = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_HEADER_BRAND: 'Acme' })
  const trip = await roundTrip('/json', { 'x-webhook-secret': 'whsec_acme' }, acme)
  const headers = trip.attempt.headers
  t.match(headers['x-acme-webhook-timestamp'], /^\d{10}$/)
  t.match(headers['x-acme-webhook-signature'], /^v1,[0-9a-f]{64}$/)
  t.equal(headers['x-service-webhook-timestamp'], undefined)
  t.equal(headers['x-service-webhook-signature'], undefined)
  t.equal((headers['x-acme-webhook-signature'] as string).slice(3),
    pythonSignature('whsec_acme', trip.runId, headers['x-acme-webhook-timestamp'] as string, trip.attempt.body))
  t.equal(verifyWebhook('whsec_acme', headers, trip.attempt.body, { brand: 'Acme' }), true)
  t.equal(verifyWebhook('whsec_acme', headers, trip.attempt.body), false, 'the default brand does not find them')
})

t.test('signing: WEBHOOK_STANDARD_HEADERS=true adds webhook-id, webhook-timestamp, webhook-signature', async t => {
  const standard = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_STANDARD_HEADERS: 'true' })
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'
  const trip = await roundTrip('/json', { 'x-webhook-secret': secret }, standard)
  const headers = trip.attempt.headers
  t.equal(headers['webhook-id'], trip.runId)
  t.equal(headers['webhook-timestamp'], headers['x-service-webhook-timestamp'])
  const { createHmac } = await import('node:crypto')
  const expected = createHmac('sha256', Buffer.from(secret.slice(6), 'base64'))
    .update(`${trip.runId}.${headers['webhook-timestamp'] as string}.`).update(trip.attempt.body).digest('base64')
  t.equal(headers['webhook-signature'], `v1,${expected}`)
  t.equal(verifyWebhook(secret, headers, trip.attempt.body), true, 'the X-Service-* signature is still there')
  const plain = await roundTrip('/json', { 'x-webhook-secret': secret })
  t.equal(plain.attempt.headers['webhook-signature'], undefined, 'off by default')
})

t.test('signing: without a secret (or with an empty one) no signature headers', async t => {
  for (const headers of [{}, { 'x-webhook-secret': '' }] as Array<Record<string, string>>) {
    const trip = await roundTrip('/json', headers)
    const names = Object.keys(trip.attempt.headers).filter(name => /webhook/i.test(name))
    t.same(names, [], 'no webhook-* headers')
    t.equal(trip.attempt.headers['x-request-id'], trip.runId, 'X-Request-Id is still there')
  }
  const generated = await call(h, '/json', hook())
  const runId = generated.headers['x-request-id'] as string
  t.match(runId, /^[0-9a-f-]{36}$/, 'a generated run id')
  const [attempt] = await deliveriesOf(receiver, runId)
  t.equal((JSON.parse((attempt as ReceivedAttempt).body.toString()) as { run_id: string }).run_id, runId, 'X-Request-Id equals run_id')
})

t.test('signing: the secret never reaches the app, the body, or any log line', async t => {
  const secret = 'whsec_DO-NOT-LEAK-4f1d2c'
  const failing = await startWebhookReceiver([500])
  t.teardown(() => failing.close())
  const sidecar = await sidecarFor(t, app.url, LOOPBACK_ENV)
  const ok = await roundTrip('/json', { 'x-webhook-secret': secret }, sidecar)
  const appSaw = app.requests.at(-1) as TestServer['requests'][number]
  t.equal(appSaw.headers['x-webhook-secret'], undefined)
  t.notOk(appSaw.rawHeaders.join('\n').includes(secret), 'no header value carries it')
  t.notOk(ok.attempt.body.toString().includes(secret), 'not in the delivered body')
  const runId = newRunId()
  await call(sidecar, '/json', hook(failing), { headers: { 'x-request-id': runId, 'x-webhook-secret': secret } })
  await eventually(() => linesWith(sidecar.logs, 'webhook failed').length === 1)
  const failed = linesWith(sidecar.logs, 'webhook failed')[0] as LogLine
  t.equal(failed.runId, runId)
  t.equal(failed.outcome, 'status 500')
  t.ok(sidecar.logs.length > 3, 'there are log lines to look at')
  t.notOk(JSON.stringify(sidecar.logs).includes(secret), 'no log line carries the secret')
  t.notOk(JSON.stringify(sidecar.logs).includes('DO-NOT-LEAK'), 'nor any part of it')
})

t.test('SSRF guard: without WEBHOOK_ALLOWED_CIDRS, non-public destinations are refused at once, no connection made', async t => {
  const target = await startWebhookReceiver([200])
  t.teardown(() => target.close())
  // an attempt that got as far as a connection could only end at its time-out, a minute away: a
  // delivery that finished was refused at once, before any connection
  const guarded = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', WEBHOOK_MAX_DELAY_MS: '50', WEBHOOK_TIMEOUT_MS: '60000' })
  const port = target.port
  const hosts = ['127.0.0.1', 'localhost', '[::1]', '10.0.0.1', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1',
    '0.0.0.0', '224.0.0.1', '[fd00::1]', '[fe80::1]', '[::ffff:127.0.0.1]', '[::ffff:7f00:1]', '0x7f000001', '2130706433',
    '127.1', '[::127.0.0.1]', '[64:ff9b::7f00:1]', 'LOCALHOST']
  for (const [i, host] of hosts.entries()) {
    const endpoint = `http://${host}:${port}/hook`
    const runId = newRunId()
    const r = await call(guarded, '/json', endpoint, { headers: { 'x-request-id': runId } })
    t.equal(r.status, 200, `${host}: the caller is unaffected`)
    await eventually(async () => await deliveriesFinished(guarded) === i + 1, 30_000)
    t.equal(target.connections(), 0, `${host}: failed at once, no connection made`)
    const lines = linesWith(guarded.logs, 'webhook failed').filter(line => line.runId === runId)
    t.equal(lines.length, 1, `${host}: one failure line`)
    t.match(lines[0], { runId, host: new URL(endpoint).host, attempts: 1, outcome: 'address refused' }, `${host}: refused, 1 attempt`)
  }
  t.equal(guarded.sidecar.webhooks.pending, 0, 'every delivery is over: nothing more can come')
  t.same(await webhookCounts(guarded), { attempts: { refused: hosts.length }, deliveries: { failed: hosts.length } })
  t.equal(linesWith(guarded.logs, 'webhook failed').length, hosts.length, 'exactly one line per refused delivery')
  t.equal(target.connections(), 0, 'the loopback receiver never got a connection')
})

t.test('SSRF guard: a refused address\'s line names the range that refused it and WEBHOOK_ALLOWED_CIDRS', async t => {
  const guarded = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const port = await freePort()
  const cases: Array<[string, string, string, string]> = [
    ['127.0.0.1', '127.0.0.1', '127.0.0.0/8 (loopback)', 'add 127.0.0.0/8 (or 127.0.0.1/32 alone)'],
    ['127.0.0.2', '127.0.0.2', '127.0.0.0/8 (loopback)', 'add 127.0.0.0/8 (or 127.0.0.2/32 alone)'],
    ['[::ffff:127.0.0.1]', '127.0.0.1', '127.0.0.0/8 (loopback)', 'add 127.0.0.0/8 (or 127.0.0.1/32 alone)'],
    ['[::1]', '::1', '::1/128 (loopback)', 'add ::1/128'],
    ['0.0.0.0', '0.0.0.0', '0.0.0.0/8 (unspecified)', 'add 0.0.0.0/8 (or 0.0.0.0/32 alone)']
  ]
  // loopback hosts only (other ranges are covered without connecting, in address-guard.test.ts): were the guard to fail, nothing leaves the machine
  for (const [host, address, range, add] of cases) {
    const endpoint = `http://${host}:${port}/hook`
    const runId = newRunId()
    await call(guarded, '/json', endpoint, { headers: { 'x-request-id': runId } })
    await eventually(() => linesWith(guarded.logs, 'webhook failed').some(line => line.runId === runId))
    const { level, time, ...line } = linesWith(guarded.logs, 'webhook failed').find(line => line.runId === runId) as LogLine
    t.equal(level, 40, `${host}: a warn line`)
    t.type(time, 'number')
    t.same(line, {
      name: 'app-sidecar',
      runId,
      host: new URL(endpoint).host,
      attempts: 1,
      outcome: 'address refused',
      address,
      range,
      hint: `${address} is in ${range}, which webhooks may not reach; ${add} to WEBHOOK_ALLOWED_CIDRS to allow it`,
      msg: 'webhook failed'
    }, `${host}: the exact line`)
  }
  // a name is judged by what it resolves to: the same fields, for the address the lookup gave
  const named = newRunId()
  await call(guarded, '/json', `http://localhost:${port}/hook`, { headers: { 'x-request-id': named } })
  await eventually(() => linesWith(guarded.logs, 'webhook failed').some(line => line.runId === named))
  t.match(linesWith(guarded.logs, 'webhook failed').find(line => line.runId === named),
    { outcome: 'address refused', address: /^(127\.0\.0\.1|::1)$/, range: /^(127\.0\.0\.0\/8|::1\/128) \(loopback\)$/, hint: /to WEBHOOK_ALLOWED_CIDRS to allow it$/ }, 'localhost')
})

t.test('SSRF guard: WEBHOOK_ALLOWED_CIDRS opens the named ranges to names and literals alike', async t => {
  const target = await startWebhookReceiver([200])
  t.teardown(() => target.close())
  const allowed = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8,::1/128' })
  for (const host of ['127.0.0.1', 'localhost', '2130706433']) {
    const runId = newRunId()
    await call(allowed, '/json', `http://${host}:${target.port}/hook`, { headers: { 'x-request-id': runId } })
    t.equal((await deliveriesOf(target, runId)).length, 1, `${host} delivered`)
  }
  await eventually(async () => await deliveriesFinished(allowed) === 3)
  t.same(await webhookCounts(allowed), { attempts: { '2xx': 3 }, deliveries: { delivered: 3 } })
})

t.test('the caller\'s response is never delayed by the webhook', async t => {
  // the receiver holds each delivery until the test releases it: the callers are answered meanwhile
  const slow = await startWebhookReceiver(['hang'])
  t.teardown(() => slow.close())
  const sidecar = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_TIMEOUT_MS: '60000' })
  await call(sidecar, '/json', undefined) // warm up (readiness, connections)
  const runId = newRunId()
  const r = await call(sidecar, '/json', hook(slow), { headers: { 'x-request-id': runId } })
  const answeredAt = performance.now()
  t.equal(r.status, 200)
  t.equal(await deliveriesFinished(sidecar), 0, 'the caller was answered, its webhook not delivered (the receiver holds it)')
  const s = await call(sidecar, '/ndjson', hook(slow), { headers: { 'x-request-id': newRunId() } })
  const streamEndedAt = performance.now()
  t.equal(s.status, 200)
  t.equal(await deliveriesFinished(sidecar), 0, 'a stream ends without waiting for its webhook either')
  await slow.waitForAttempts(2)
  t.equal(await deliveriesFinished(sidecar), 0, 'the deliveries were still in progress after the caller was done')
  slow.release(200)
  await eventually(async () => await deliveriesFinished(sidecar) === 2, 30_000)
  t.same(await webhookCounts(sidecar), { attempts: { '2xx': 2 }, deliveries: { delivered: 2 } })
  const ended = slow.attempts.map(attempt => attempt.endedAt as number)
  t.ok(ended.every(at => at > answeredAt && at > streamEndedAt), 'each webhook was answered after both callers had their answers')
})

t.test('bounds: past maxPending, a webhook is dropped at once (logged, counted)', async t => {
  const stuck = await startWebhookReceiver(['hang'])
  t.teardown(() => stuck.close())
  const sidecar = await sidecarFor(t, app.url, LOOPBACK_ENV, { webhookLimits: { maxPending: 2, maxPendingBytes: 1 << 30 } })
  const ids = [newRunId(), newRunId(), newRunId()]
  for (const id of ids) t.equal((await call(sidecar, '/json', hook(stuck), { headers: { 'x-request-id': id } })).status, 200)
  await stuck.waitForAttempts(2)
  await eventually(() => linesWith(sidecar.logs, 'webhook dropped').length === 1)
  t.equal(sidecar.sidecar.webhooks.pending, 2, 'the sender holds the first two only: the third cannot leave later')
  t.equal(stuck.attempts.length, 2, 'the third never left')
  t.same(stuck.attempts.map(a => a.headers['x-request-id']), ids.slice(0, 2))
  const dropped = linesWith(sidecar.logs, 'webhook dropped')
  t.equal(dropped.length, 1)
  t.match(dropped[0], { runId: ids[2], host: `127.0.0.1:${stuck.port}` })
  t.same(await webhookCounts(sidecar), { attempts: {}, deliveries: { dropped: 1 } })

  stuck.release(200)
  await eventually(async () => (await webhookCounts(sidecar)).deliveries.delivered === 2)
  const later = newRunId()
  await call(sidecar, '/json', hook(stuck), { headers: { 'x-request-id': later } })
  await stuck.waitForAttempts(3)
  t.equal((stuck.attempts[2] as ReceivedAttempt).headers['x-request-id'], later, 'room again once deliveries finished')
  stuck.release(200)
  await eventually(async () => (await webhookCounts(sidecar)).deliveries.delivered === 3)
  t.same(await webhookCounts(sidecar), { attempts: { '2xx': 3 }, deliveries: { delivered: 3, dropped: 1 } })
})

t.test('bounds: past maxPendingBytes, a webhook is dropped; a smaller one still fits', async t => {
  const stuck = await startWebhookReceiver(['hang'])
  t.teardown(() => stuck.close())
  const sidecar = await sidecarFor(t, app.url, LOOPBACK_ENV, { webhookLimits: { maxPending: 100, maxPendingBytes: 1500 } })
  const [big, bigger, small] = [newRunId(), newRunId(), newRunId()]
  await call(sidecar, '/big?n=1000', hook(stuck), { headers: { 'x-request-id': big } })
  await stuck.waitForAttempts(1)
  t.ok((stuck.attempts[0] as ReceivedAttempt).body.length > 1000 && (stuck.attempts[0] as ReceivedAttempt).body.length < 1300, 'about 1.1 kB pending')
  await call(sidecar, '/big?n=1000', hook(stuck), { headers: { 'x-request-id': bigger } })
  await eventually(() => linesWith(sidecar.logs, 'webhook dropped').length === 1)
  t.match(linesWith(sidecar.logs, 'webhook dropped')[0], { runId: bigger })
  await call(sidecar, '/json', hook(stuck), { headers: { 'x-request-id': small } })
  await stuck.waitForAttempts(2)
  t.same(stuck.attempts.map(a => a.headers['x-request-id']), [big, small], 'a small body fits beside the big one')
  t.same(await webhookCounts(sidecar), { attempts: {}, deliveries: { dropped: 1 } })
  stuck.release(200)
  await eventually(async () => (await webhookCounts(sidecar)).deliveries.delivered === 2)
})

t.test('WebSocket upgrades ignore webhookEndpoint', async t => {
  const wsApp = await startWebSocketApp()
  t.teardown(() => wsApp.close())
  const quiet = await startWebhookReceiver([200])
  t.teardown(() => quiet.close())
  const sidecar = await sidecarFor(t, wsApp.url, LOOPBACK_ENV)
  const path = invokePath('/chat', hook(quiet))
  const outcome = await connectClient(`ws://127.0.0.1:${sidecar.sidecar.port}${path}`, [], { headers: { 'x-webhook-secret': 'whsec_ws' } })
  if (outcome.kind !== 'open') { t.fail(`upgrade refused: ${outcome.status}`); return }
  outcome.ws.send('hello')
  t.equal((await nextMessage(outcome.ws)).data.toString(), 'hello')
  const closed = clientClosed(outcome.ws)
  outcome.ws.close(1000, 'bye')
  await closed
  t.equal(wsApp.connections[0]?.url, '/chat', 'the app got the path without webhookEndpoint')
  // its access line once the sidecar is done with it: a webhook handed over would then be pending or counted
  await eventually(() => linesWith(sidecar.logs, 'websocket').length === 1)
  t.equal(sidecar.sidecar.webhooks.pending, 0, 'no webhook pending')
  t.equal(quiet.connections(), 0, 'no delivery for the WebSocket')
  t.same(await webhookCounts(sidecar), { attempts: {}, deliveries: {} })

  const http = await call(sidecar, '/plain', hook(quiet))
  t.equal(http.status, 200, 'a plain HTTP call to the same app does get one')
  await quiet.waitForAttempts(1)
})
