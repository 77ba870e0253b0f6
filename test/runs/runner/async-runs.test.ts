import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { verifyWebhook } from '../../../src/webhook/webhook-signature.ts'
import { fetchMetrics, metric, sampleValue } from '../../helpers/admin-metrics.ts'
import { send } from '../../helpers/http-client.ts'
import { receiverFor, runsAppFor, runsClient, runsSidecarFor, type RunRecordBody } from '../../helpers/runs-client.ts'
import { eventually, type Harness, startHarness } from '../../helpers/sidecar-harness.ts'
import { patient, sleep } from '../../helpers/timing.ts'
import type { WebhookReceiver } from '../../helpers/webhook-receiver.ts'

const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
const RECORD_FIELDS = ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'result', 'error', 'webhook']

const appFor = runsAppFor
const sidecarFor = async (t: Test, appUrl: string, env: Record<string, string> = {}): Promise<Harness> => await runsSidecarFor(t, appUrl, { DISABLE_AUTH: 'true', ...env })

/** The record's fields in the order of docs/runs.md, "The record": every key known, none twice, in order. */
function checkFieldOrder (t: Test, record: object, expected: string[]): void {
  const keys = Object.keys(record)
  t.same(keys, expected, 'fields present, in order')
  t.same(keys, RECORD_FIELDS.filter(key => keys.includes(key)), 'in the SPEC order')
}

/** The record's text as the sidecar writes it, from its parsed fields and the result as the app sent it. */
function recordText (r: RunRecordBody, resultJson: string | undefined): string {
  let out = `{"run_id":"${r.run_id}","status":"${r.status}","created_at":"${r.created_at}"`
  if (r.started_at !== undefined) out += `,"started_at":"${r.started_at}"`
  if (r.completed_at !== undefined) out += `,"completed_at":"${r.completed_at}"`
  if (r.queue_time_ms !== undefined) out += `,"queue_time_ms":${r.queue_time_ms}`
  if (r.run_time_ms !== undefined) out += `,"run_time_ms":${r.run_time_ms}`
  if (r.status_code !== undefined) out += `,"status_code":${r.status_code}`
  if (resultJson !== undefined) out += `,"result":${resultJson}`
  if (r.error !== undefined) out += `,"error":${JSON.stringify(r.error)}`
  if (r.webhook !== undefined) out += `,"webhook":${JSON.stringify(r.webhook)}`
  return out + '}'
}

const hookQuery = (receiver: WebhookReceiver, path = '/hook'): string => `webhookEndpoint=${encodeURIComponent(receiver.url + path)}`

t.test('?async=true with auth on: 202 at once, and the app later gets exactly the request a sync call sends', async t => {
  const app = await appFor(t)
  const receiver = await receiverFor(t)
  const h = await startHarness(app.url, { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  t.teardown(() => h.close())
  const client = runsClient({ base: h.base, project: 'proj', app: 'app', token: await h.token('proj') })
  const body = Buffer.concat([Buffer.from('{"n":1}'), Buffer.from([0x00, 0xff, 0xfe, 0x80, 0x0a])])
  const headers = {
    'content-type': 'application/octet-stream', 'x-custom': 'kept', 'x-webhook-secret': 'whsec-twin', accept: 'application/json', 'accept-encoding': 'gzip'
  }
  const query = `b=1&${hookQuery(receiver)}&c=%20x&c=2`

  const sync = await client.call(`/json/twin?${query}`, { headers: { ...headers, 'x-request-id': 'sync-twin' }, body })
  t.equal(sync.status, 200)
  const submittedAt = Date.now()
  const submitted = await client.call(`/json/twin?b=1&async=true&${hookQuery(receiver)}&c=%20x&c=2`, { headers: { ...headers, 'x-request-id': 'async-twin' }, body })
  t.equal(submitted.status, 202)
  t.equal(submitted.text, '{"run_id":"async-twin","status":"queued"}', 'the 202 body, byte for byte')
  t.equal(submitted.headers.location, '/v4/proj/app/_runs/async-twin')
  t.equal(submitted.headers['x-request-id'], 'async-twin')
  t.equal(submitted.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(submitted.headers['content-length'], String(Buffer.byteLength(submitted.text)))

  await eventually(() => app.requests.length === 2 && app.requests[1]?.complete === true)
  const [twin, run] = app.requests
  t.equal(run?.method, 'POST')
  t.equal(run?.url, '/json/twin?b=1&c=%20x&c=2', 'query without async=true and webhookEndpoint, the rest byte for byte')
  t.equal(run?.url, twin?.url)
  t.same(run?.body, body, 'the body bytes')
  t.same(run?.body, twin?.body)
  t.equal(run?.headers['x-request-id'], 'async-twin', 'X-Request-Id is the run id')
  t.equal(run?.headers.authorization, undefined, 'the checked token does not reach the app')
  t.equal(run?.headers['x-webhook-secret'], undefined)
  t.equal(run?.headers['accept-encoding'], undefined, 'as for a sync call in the cortex runtime')
  t.equal(run?.headers['x-custom'], 'kept')
  t.equal(run?.headers['x-forwarded-proto'], 'http')
  t.equal(run?.headers['x-forwarded-for'], '127.0.0.1')
  t.equal(run?.headers['x-forwarded-host'], `127.0.0.1:${h.sidecar.port}`)
  const withoutRunId = (raw: string[] | undefined): string[] => (raw ?? []).map(value => value === 'async-twin' || value === 'sync-twin' ? '<run id>' : value)
  t.same(withoutRunId(run?.rawHeaders), withoutRunId(twin?.rawHeaders), 'the same headers as the sync call, in the same order')

  const { record, response } = await client.finished('async-twin')
  t.equal(response.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(record.status, 'succeeded')
  t.equal(record.status_code, 200)
  t.same(record.result, { method: 'POST', url: '/json/twin?b=1&c=%20x&c=2', body: body.toString('utf8') })
  t.match(record.created_at, ISO_UTC)
  t.ok(Date.parse(record.created_at) >= submittedAt - 1 && Date.parse(record.created_at) <= Date.now())

  const unauthenticated = await send(client.runUrl('async-twin'))
  t.equal(unauthenticated.status, 401, 'reading a run needs a token too')
  const deliveries = await receiver.waitForAttempts(2)
  t.same(deliveries.map(d => d.headers['x-request-id']).sort(), ['async-twin', 'sync-twin'], 'both sent their webhook')
  const asyncDelivery = deliveries.find(d => d.headers['x-request-id'] === 'async-twin')
  t.ok(verifyWebhook('whsec-twin', asyncDelivery?.headers ?? {}, asyncDelivery?.body ?? ''), 'signed with the call\'s secret')
})

t.test('Prefer: respond-async asks for an async run and is not forwarded; the other preferences are', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const client = runsClient({ base: h.base })
  const cases = [
    ['respond-async', undefined],
    ['Respond-Async', undefined],
    ['return=minimal, respond-async', 'return=minimal'],
    ['respond-async, handling=lenient, return=minimal', 'handling=lenient, return=minimal'],
    ['respond-async; x=1,wait=10', 'wait=10']
  ] as const
  for (const [i, [prefer, forwarded]] of cases.entries()) {
    const runId = `prefer-${i}`
    const submitted = await client.call(`/json/p${i}?q=${i}`, { headers: { prefer, 'x-request-id': runId } })
    t.equal(submitted.status, 202, prefer)
    t.equal(submitted.text, `{"run_id":"${runId}","status":"queued"}`)
    t.equal(submitted.headers.location, `/v4/p/a/_runs/${runId}`)
    t.equal((await client.finished(runId)).record.status, 'succeeded')
    const seen = app.requestsTo(`/json/p${i}`)
    t.equal(seen.length, 1)
    t.equal(seen[0]?.url, `/json/p${i}?q=${i}`)
    t.equal(seen[0]?.headers.prefer, forwarded, `Prefer: ${prefer} reaches the app as ${String(forwarded)}`)
  }
  const plain = await client.call('/json/plain', { headers: { prefer: 'return=minimal' } })
  t.equal(plain.status, 200, 'another preference alone is a sync call')
  t.equal(app.requestsTo('/json/plain')[0]?.headers.prefer, 'return=minimal')
  const asyncFalse = await client.call('/json/false?async=false')
  t.equal(asyncFalse.status, 200, '?async=false is a sync call')
  t.equal(app.requestsTo('/json/false')[0]?.url, '/json/false?async=false', 'and its query is forwarded as it is')
})

t.test('the record: queued → running → succeeded, each field once it applies, the result as the app sent it', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1', HOSTNAME: 'replica-under-test' })
  const client = runsClient({ base: h.base })
  const blocker = client.call('/hold/sync', { method: 'GET' })
  const syncHeld = await app.waitForHeld(1)

  const before = Date.now()
  t.equal((await client.submit('/hold/run', 'progress')).status, 202)
  const queued = await client.read('progress')
  checkFieldOrder(t, queued.record, ['run_id', 'status', 'created_at'])
  t.equal(queued.record.run_id, 'progress')
  t.equal(queued.record.status, 'queued')
  t.match(queued.record.created_at, ISO_UTC)
  t.ok(Date.parse(queued.record.created_at) >= before - 1)
  t.equal(queued.response.text, recordText(queued.record, undefined), 'the record text, byte for byte')
  t.equal(queued.response.headers['x-request-id'] !== undefined, true)
  t.equal(app.requestsTo('/hold/run').length, 0, 'a queued run has not reached the app')

  syncHeld.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  t.equal((await blocker).status, 200)
  const runHeld = await app.waitForHeld(2)
  t.equal(runHeld.url, '/hold/run')
  const running = await client.read('progress')
  checkFieldOrder(t, running.record, ['run_id', 'status', 'created_at', 'started_at', 'queue_time_ms'])
  t.equal(running.record.status, 'running')
  t.equal(running.record.created_at, queued.record.created_at)
  t.equal(running.response.text, recordText(running.record, undefined))
  t.match(running.record.started_at, ISO_UTC)
  const queueMs = Date.parse(running.record.started_at as string) - Date.parse(running.record.created_at)
  t.ok(Math.abs((running.record.queue_time_ms as number) - queueMs) <= 1, `queue_time_ms ${running.record.queue_time_ms} ≈ started_at - created_at ${queueMs}`)
  t.equal(await metric(h, 'sidecar_async_queued_runs'), 0)

  await sleep(60) // a run time long enough to tell from zero
  runHeld.res.writeHead(201, { 'content-type': 'application/json' }).end(' {"ok": true,  "n": [1, 2]}\n')
  const done = await client.finished('progress')
  checkFieldOrder(t, done.record, ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'result'])
  t.equal(done.record.status, 'succeeded')
  t.equal(done.record.status_code, 201)
  t.same(done.record.result, { ok: true, n: [1, 2] })
  t.equal(done.response.text, recordText(done.record, '{"ok": true,  "n": [1, 2]}'), 'the result spliced in as the app sent it (trimmed)')
  t.equal(done.record.started_at, running.record.started_at)
  t.equal(done.record.queue_time_ms, running.record.queue_time_ms)
  t.match(done.record.completed_at, ISO_UTC)
  const runMs = done.record.run_time_ms as number
  t.ok(runMs >= 55, `run_time_ms ${runMs} covers the time the app took`)
  // counted within the run's own start and end, whatever the load (a ms of rounding either side)
  const startToEnd = Date.parse(done.record.completed_at as string) - Date.parse(done.record.started_at as string)
  t.ok(runMs <= startToEnd + 2, `run_time_ms ${runMs} within started_at..completed_at (${startToEnd} ms)`)
  t.ok(Date.parse(done.record.completed_at as string) >= Date.parse(done.record.started_at as string))
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'succeeded' }), 1)
  // one line for the finished run, from the replica that ran it
  const ended = h.logs.filter(line => line.msg === 'run finished')
  t.same(ended.map(({ time: _time, ...line }) => line), [{
    level: 30,
    name: 'app-sidecar',
    runId: 'progress',
    projectId: 'p',
    appName: 'a',
    status: 'succeeded',
    statusCode: 201,
    attempt: 1,
    replica: 'replica-under-test',
    queueTimeMs: done.record.queue_time_ms,
    runTimeMs: done.record.run_time_ms,
    msg: 'run finished'
  }])
})

t.test('the result: JSON parsed, text as a string, an empty body as ""', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const client = runsClient({ base: h.base })
  await client.submit('/text', 'text-run', { method: 'GET' })
  await client.submit('/status/204', 'empty-run', { method: 'GET' })
  await client.submit('/json?x=1', 'json-run', { method: 'PUT', body: 'payload' })
  const text = await client.finished('text-run')
  t.equal(text.record.result, 'plain text')
  t.equal(text.record.status_code, 200)
  t.match(text.response.text, /,"status_code":200,"result":"plain text"}$/)
  const empty = await client.finished('empty-run')
  t.equal(empty.record.status, 'succeeded')
  t.equal(empty.record.status_code, 204)
  t.equal(empty.record.result, '')
  const json = await client.finished('json-run')
  t.same(json.record.result, { method: 'PUT', url: '/json?x=1', body: 'payload' })
})

t.test('failures: a non-2xx answer, a reset, an app gone, the deadline', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { DEADLINE_SECONDS: '0.3' })
  const client = runsClient({ base: h.base })

  await client.submit('/status/500', 'app-500')
  const failed = await client.finished('app-500')
  checkFieldOrder(t, failed.record, ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'result', 'error'])
  t.equal(failed.record.status, 'failed')
  t.equal(failed.record.status_code, 500)
  t.equal(failed.record.result, 'status 500')
  t.same(failed.record.error, { message: 'app answered 500' })
  await client.submit('/status/404', 'app-404')
  const missing = await client.finished('app-404')
  t.same([missing.record.status, missing.record.status_code, missing.record.result, missing.record.error], ['failed', 404, 'status 404', { message: 'app answered 404' }])

  await client.submit('/reset', 'app-reset')
  const reset = await client.finished('app-reset')
  t.equal(reset.record.status, 'failed')
  t.equal(reset.record.status_code, 502)
  t.same(reset.record.result, { message: 'app unreachable: connection reset' })
  t.same(reset.record.error, { message: 'app unreachable: connection reset' })

  const before = performance.now()
  await client.submit('/hold/late', 'too-late')
  const held = await app.waitForHeld(1)
  const late = await client.finished('too-late')
  t.equal(late.record.status, 'failed')
  t.equal(late.record.status_code, 504)
  t.same(late.record.result, { message: 'request exceeded its deadline of 0.3s' })
  t.same(late.record.error, { message: 'request exceeded its deadline of 0.3s' })
  const runMs = late.record.run_time_ms as number
  t.ok(runMs >= 295, `cut at the deadline, not before (run_time_ms ${runMs})`)
  // the app holds forever: only the 0.3 s deadline ends it, and not one counted 10x or more too long
  t.ok(runMs < patient(1000), `cut at the deadline, not a much later one (run_time_ms ${runMs})`)
  const cutAt = await held.cut
  t.ok(cutAt - before < patient(1500), 'the app request was aborted at the deadline, not left to hang')
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'failed' }), 4)

  // an app that was ready once and is gone now
  const gone = await appFor(t)
  const goneSidecar = await sidecarFor(t, gone.url)
  const goneClient = runsClient({ base: goneSidecar.base })
  await goneClient.submit('/json', 'warm-up')
  t.equal((await goneClient.finished('warm-up')).record.status, 'succeeded')
  await gone.close()
  await goneClient.submit('/json', 'app-gone')
  const unreachable = await goneClient.finished('app-gone')
  t.equal(unreachable.record.status, 'failed')
  t.equal(unreachable.record.status_code, 502)
  t.same(unreachable.record.result, { message: 'app unreachable: connection refused' })
})

t.test('DEADLINE_SECONDS bounds the time at the app, not the wait in the queue', async t => {
  const app = await appFor(t)
  app.ready = false
  const h = await sidecarFor(t, app.url, { DEADLINE_SECONDS: '0.3', READYCHECK_PATH: '/ready' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'patient')).status, 202)
  await sleep(500) // only time passing shows the queue wait is not cut by the deadline
  t.equal((await client.read('patient')).record.status, 'queued', 'waits for the app\'s first readiness')
  app.ready = true
  const done = await client.finished('patient')
  t.equal(done.record.status, 'succeeded')
  t.equal(done.record.status_code, 200)
  t.ok((done.record.queue_time_ms as number) >= 500, `queue_time_ms ${done.record.queue_time_ms}`)
})

t.test('a streamed answer: the result is the array of event values (SSE, NDJSON, JSON Lines, chunks with Accept: text/event-stream)', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const client = runsClient({ base: h.base })
  const modes = [
    { path: '/sse', accept: undefined, units: ['data: {"a":1}\n\n', 'event: x\nid: 7\ndata: two\ndata: lines\n\n: comment\n\n', 'data: 3\n\n'], values: [{ a: 1 }, 'two\nlines', 3] },
    { path: '/ndjson', accept: undefined, units: ['{"a":1}\n', '  \ntext\n', '3'], values: [{ a: 1 }, 'text', 3] },
    { path: '/jsonl', accept: undefined, units: ['{"a":1}\n', 'text\r\n', '3\n'], values: [{ a: 1 }, 'text', 3] },
    { path: '/chunks', accept: 'text/event-stream', units: ['{"a":1}', 'te xt', '3'], values: [{ a: 1 }, 'te xt', 3] }
  ]
  for (const mode of modes) {
    const runId = `stream${mode.path.replace('/', '-')}`
    const headers = mode.accept === undefined ? {} : { accept: mode.accept }
    t.equal((await client.submit(mode.path, runId, { headers })).status, 202)
    const held = await app.waitForHeld(app.held.length + 1)
    const reader = await client.follow(runId)
    for (const [i, unit] of mode.units.entries()) {
      held.res.write(unit)
      // one unit at a time: each chunk is read on its own
      if (i < mode.units.length - 1) await reader.waitForEvents(i + 1)
    }
    held.res.end()
    await reader.done
    t.same(reader.events.map(e => e.id), [...mode.values.map((_v, i) => String(i)), `${runId}.done`], `${mode.path}: the events, numbered, then done`)
    const { record } = await client.finished(runId)
    t.equal(record.status, 'succeeded', mode.path)
    t.equal(record.status_code, 200)
    t.same(record.result, mode.values, `${mode.path}: the values, each parsed when JSON`)
  }

  // a chunked body without Accept: text/event-stream is a plain body
  t.equal((await client.submit('/chunks/plain', 'not-a-stream')).status, 202)
  const plain = await app.waitForHeld(app.held.length + 1)
  plain.res.write('{"a":')
  await sleep(20) // two reads, as a stream would have had
  plain.res.end('1}')
  const { record } = await client.finished('not-a-stream')
  t.same(record.result, { a: 1 })
  const reader = await client.follow('not-a-stream')
  await reader.done
  t.same(reader.events.map(e => e.event), ['done'], 'no events')
})

t.test('webhooks of async runs: the body from the record, signed, and the delivery recorded', async t => {
  const app = await appFor(t)
  const receiver = await receiverFor(t, [{ status: 200, delayMs: 0 }])
  const h = await sidecarFor(t, app.url, { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base })
  const secret = 'whsec-do-not-leak-4f1c'
  t.equal((await client.submit(`/hold/hooked?${hookQuery(receiver)}`, 'hooked', { headers: { 'x-webhook-secret': secret } })).status, 202)
  const held = await app.waitForHeld(1)
  t.equal(held.req.headers['x-webhook-secret'], undefined, 'the secret never reaches the app')
  const running = await client.read('hooked')
  t.same(running.record.webhook, { status: 'pending', attempts: 0 })
  checkFieldOrder(t, running.record, ['run_id', 'status', 'created_at', 'started_at', 'queue_time_ms', 'webhook'])
  held.res.writeHead(200, { 'content-type': 'application/json' }).end('{"answer": 42}')
  const [delivery] = await receiver.waitForAttempts(1)
  const final = await client.until('hooked', r => r.webhook?.status !== 'pending')
  t.same(final.webhook, { status: 'delivered', attempts: 1 })
  const done = await client.read('hooked')
  t.equal(delivery?.method, 'POST')
  t.equal(delivery?.url, '/hook')
  t.equal(delivery?.headers['content-type'], 'application/json')
  t.equal(delivery?.headers['x-request-id'], 'hooked')
  t.equal(delivery?.body.toString(),
    `{"run_id":"hooked","status_code":200,"result":{"answer": 42},"run_time_ms":${done.record.run_time_ms},"timestamp":"${done.record.completed_at}"}`,
    'the webhook body, byte for byte, from the record')
  t.ok(verifyWebhook(secret, delivery?.headers ?? {}, delivery?.body ?? ''), 'signed with X-Webhook-Secret')
  t.notOk(verifyWebhook('another-secret', delivery?.headers ?? {}, delivery?.body ?? ''))
  t.match(delivery?.headers['x-service-webhook-signature'], /^v1,[0-9a-f]{64}$/)

  const events = await client.follow('hooked')
  await events.done
  const metrics = await fetchMetrics(h.admin)
  for (const [where, text] of [['record', done.response.text], ['events', events.raw()], ['logs', JSON.stringify(h.logs)], ['metrics', metrics]] as const) {
    t.notOk(text.includes(secret), `the secret is not in the ${where}`)
  }
  t.notOk(JSON.stringify(app.requests.map(r => r.rawHeaders)).includes(secret), 'nor in any app request')
})

t.test('webhooks of async runs: retried, failed, pending while in flight, unsigned without a secret, sent for a failed run', async t => {
  const app = await appFor(t)
  const retried = await receiverFor(t, [404, 200])
  const refused = await receiverFor(t, [500])
  const hanging = await receiverFor(t, ['hang'])
  const h = await sidecarFor(t, app.url, { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_MAX_DELAY_MS: '20' })
  const client = runsClient({ base: h.base })

  await client.submit(`/json?${hookQuery(retried)}`, 'retried')
  t.same((await client.until('retried', r => r.webhook?.status !== 'pending')).webhook, { status: 'delivered', attempts: 2 })
  t.equal(retried.attempts.length, 2)
  t.equal(retried.attempts[0]?.body.toString(), retried.attempts[1]?.body.toString(), 'each attempt sends the same body')
  t.equal(retried.attempts[0]?.headers['x-service-webhook-signature'], undefined, 'no secret: no signature')

  await client.submit(`/status/503?${hookQuery(refused)}`, 'refused')
  t.same((await client.until('refused', r => r.webhook?.status !== 'pending')).webhook, { status: 'failed', attempts: 1 })
  const refusedBody = JSON.parse(refused.attempts[0]?.body.toString() ?? '') as Record<string, unknown>
  t.same(Object.keys(refusedBody), ['run_id', 'status_code', 'result', 'run_time_ms', 'timestamp'])
  t.same([refusedBody.run_id, refusedBody.status_code, refusedBody.result], ['refused', 503, 'status 503'], 'a failed run\'s webhook says how it failed')

  await client.submit(`/json?${hookQuery(hanging)}`, 'in-flight')
  await hanging.waitForAttempts(1)
  const inFlight = await client.read('in-flight')
  t.equal(inFlight.record.status, 'succeeded')
  t.same(inFlight.record.webhook, { status: 'pending', attempts: 0 }, 'pending while the attempt is under way')
  hanging.release(200)
  t.same((await client.until('in-flight', r => r.webhook?.status !== 'pending')).webhook, { status: 'delivered', attempts: 1 })
})

t.test('metrics: sidecar_runs_total by final status, sidecar_async_queued_runs', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base })
  const text = await fetchMetrics(h.admin)
  t.equal(sampleValue(text, 'sidecar_async_queued_runs'), 0)
  for (const status of ['succeeded', 'failed', 'canceled']) t.equal(sampleValue(text, 'sidecar_runs_total', { status }), undefined, `no ${status} run yet`)

  await client.submit('/hold/first', 'm-first')
  const first = await app.waitForHeld(1)
  for (const id of ['m-1', 'm-2', 'm-3']) await client.submit('/json', id)
  await client.submit('/status/500', 'm-4')
  t.equal(await metric(h, 'sidecar_async_queued_runs'), 4)
  t.equal((await client.cancel('m-3')).status, 200)
  t.equal(await metric(h, 'sidecar_async_queued_runs'), 3, 'a canceled run no longer waits')
  first.res.writeHead(200).end('{}')
  await client.finished('m-4')
  const after = await fetchMetrics(h.admin)
  t.equal(sampleValue(after, 'sidecar_async_queued_runs'), 0)
  t.equal(sampleValue(after, 'sidecar_runs_total', { status: 'succeeded' }), 3)
  t.equal(sampleValue(after, 'sidecar_runs_total', { status: 'failed' }), 1)
  t.equal(sampleValue(after, 'sidecar_runs_total', { status: 'canceled' }), 1)
  t.same(app.requests.map(r => r.url), ['/hold/first', '/json', '/json', '/status/500'], 'oldest first; the canceled run never ran')
  t.same(app.requests.slice(1, 3).map(r => r.headers['x-request-id']), ['m-1', 'm-2'])
})

t.test('bad input on submit: nothing is queued', async t => {
  const app = await appFor(t)
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { MAX_BODY_BYTES: '10', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base })
  const store = h.sidecar.runs
  const refusals = [
    ['big', { body: 'x'.repeat(11) }, 413, '{"message":"request body exceeds 10 bytes"}'],
    ['chunked', { body: ['x'.repeat(6), 'x'.repeat(6)] }, 413, '{"message":"request body exceeds 10 bytes"}'],
    ['bad-hook', { query: 'webhookEndpoint=ftp%3A%2F%2Fx' }, 400, '{"message":"webhookEndpoint must be an absolute http or https URL"}'],
    ['user-info', { query: `webhookEndpoint=${encodeURIComponent('http://u:p@127.0.0.1/')}` }, 400, '{"message":"webhookEndpoint must not carry user-info"}']
  ] as const
  for (const [runId, input, status, body] of refusals) {
    const path = 'query' in input ? `/json?${input.query}` : '/json'
    const refused = await client.submit(path, runId, 'body' in input ? { body: input.body as string | string[] } : {})
    t.equal(refused.status, status, runId)
    t.equal(refused.text, body)
    t.equal(refused.headers['x-request-id'], runId)
    t.equal((await send(client.runUrl(runId))).status, 404, `${runId}: not recorded`)
  }
  t.equal(await store.queue.queuedCount(), 0)
  t.equal(app.requests.length, 0, 'nothing reached the app')
  t.equal(receiver.connections(), 0, 'no webhook for a refused call')

  // a body at the limit is fine, content-length or chunked
  t.equal((await client.submit('/json', 'at-limit', { body: 'x'.repeat(10) })).status, 202)
  t.equal((await client.submit('/json', 'chunked-at-limit', { body: ['x'.repeat(5), 'y'.repeat(5)] })).status, 202)
  t.equal((await client.finished('chunked-at-limit')).record.status, 'succeeded')
  t.same(app.requestsTo('/json').map(r => r.body.toString()).sort(), ['xxxxxxxxxx', 'xxxxxyyyyy'])
})

t.test('ASYNC_QUEUE_DEPTH: one more waiting run is 503 with Retry-After, and not recorded', async t => {
  const app = await appFor(t)
  app.ready = false // the app never gets ready: runs stay queued
  const h = await sidecarFor(t, app.url, { ASYNC_QUEUE_DEPTH: '2', READYCHECK_PATH: '/ready' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'q-1')).status, 202)
  t.equal((await client.submit('/json', 'q-2')).status, 202)
  const full = await client.submit('/json', 'q-3')
  t.equal(full.status, 503)
  t.equal(full.headers['retry-after'], '1')
  t.equal(full.headers['x-request-id'], 'q-3')
  t.equal(full.text, '{"message":"too many async runs waiting"}')
  t.equal((await send(client.runUrl('q-3'))).status, 404)
  t.equal(await h.sidecar.runs.queue.queuedCount(), 2)
  t.equal(await metric(h, 'sidecar_async_queued_runs'), 2)
  t.equal((await client.cancel('q-1')).status, 200)
  t.equal((await client.submit('/json', 'q-3')).status, 202, 'room again once a waiting run is canceled; the id was never taken')
  const other = runsClient({ base: h.base, app: 'other' })
  t.equal((await other.submit('/json', 'q-4')).status, 202, 'the depth is per app')
})

t.test('a reused X-Request-Id is 409 and leaves the first run as it was', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base })
  await client.submit('/hold/first', 'taken-id')
  const held = await app.waitForHeld(1)
  const whileRunning = await client.submit('/json', 'taken-id')
  t.equal(whileRunning.status, 409)
  t.equal(whileRunning.text, '{"message":"a run with this id already exists"}')
  t.equal(whileRunning.headers['x-request-id'], 'taken-id')
  t.equal((await client.read('taken-id')).record.status, 'running')
  held.res.writeHead(200).end('"first"')
  t.equal((await client.finished('taken-id')).record.result, 'first')
  const afterward = await client.submit('/json', 'taken-id', { headers: { prefer: 'respond-async' } })
  t.equal(afterward.status, 409)
  t.equal((await client.read('taken-id')).record.result, 'first', 'the first run\'s record is unchanged')
  t.equal(app.requests.length, 1, 'the refused ones never reached the app')
  const elsewhere = runsClient({ base: h.base, app: 'other-app' })
  t.equal((await elsewhere.submit('/json', 'taken-id')).status, 202, 'run ids are per app')
})

t.test('sync calls waiting for a slot go before queued async runs', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base })
  const first = client.call('/hold/sync-1', { method: 'GET' })
  const firstHeld = await app.waitForHeld(1)
  t.equal((await client.submit('/hold/async', 'waits')).status, 202)
  const second = client.call('/hold/sync-2', { method: 'GET' })
  await eventually(async () => await metric(h, 'sidecar_queued_requests') === 1)

  firstHeld.res.writeHead(200).end('{}')
  const secondHeld = await app.waitForHeld(2)
  t.equal(secondHeld.url, '/hold/sync-2', 'the waiting sync call went first')
  t.equal((await client.read('waits')).record.status, 'queued')
  secondHeld.res.writeHead(200).end('{}')
  const asyncHeld = await app.waitForHeld(3)
  t.equal(asyncHeld.url, '/hold/async')
  t.equal(asyncHeld.req.headers['x-request-id'], 'waits')
  asyncHeld.res.writeHead(200).end('{}')
  t.same([(await first).status, (await second).status], [200, 200])
  t.equal((await client.finished('waits')).record.status, 'succeeded')
  t.same(app.requests.map(r => r.url), ['/hold/sync-1', '/hold/sync-2', '/hold/async'])
})

t.test('drain (memory store): queued runs still run within the grace period', async t => {
  const app = await appFor(t)
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1' })
  t.teardown(() => h.jwks.close()) // the drain closes the sidecar itself
  const client = runsClient({ base: h.base })
  await client.submit('/hold/a', 'drain-a')
  const held = await app.waitForHeld(1)
  await client.submit('/json/b', 'drain-b')
  await client.submit('/json/c', 'drain-c')
  const startedAt = performance.now()
  const drained = h.sidecar.drain(60) // a grace period far past the scaled bound below
  held.res.writeHead(200).end('"a"')
  t.equal(await drained, true, 'nothing was cut')
  t.ok(performance.now() - startedAt < patient(5000), 'the drain ended once the runs had run, not at the 60 s grace period')
  const scope = { projectId: 'p', appName: 'a' }
  for (const [runId, result] of [['drain-a', '"a"'], ['drain-b', null], ['drain-c', null]] as const) {
    const view = await h.sidecar.runs.records.get(scope, runId)
    t.equal(view.record.status, 'succeeded', runId)
    if (result !== null) t.equal(view.resultJson, result)
  }
  t.same(app.requests.map(r => r.url), ['/hold/a', '/json/b', '/json/c'])
})

t.test('drain (memory store): a run still running when the grace period ends fails with 503 "replica stopped"', async t => {
  const app = await appFor(t)
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1' })
  t.teardown(() => h.jwks.close())
  const client = runsClient({ base: h.base })
  await client.submit('/hold/stuck', 'stuck')
  const held = await app.waitForHeld(1)
  await client.submit('/json/behind', 'behind')
  const startedAt = performance.now()
  t.equal(await h.sidecar.drain(0.5), false, 'a run was cut')
  const elapsed = performance.now() - startedAt
  t.ok(elapsed >= 490, `the grace period was given (${elapsed} ms)`)
  // the app never answers: only the 0.5 s grace period ends the drain, not one counted 10x or more too long
  t.ok(elapsed < patient(5000), `the drain ended at its grace period (${elapsed} ms)`)
  t.ok(held.wasCut(), 'the app request was aborted')
  const scope = { projectId: 'p', appName: 'a' }
  const stuck = await h.sidecar.runs.records.get(scope, 'stuck')
  t.equal(stuck.record.status, 'failed')
  t.equal(stuck.record.status_code, 503)
  t.same(stuck.record.error, { message: 'replica stopped' })
  t.equal(stuck.resultJson, '{"message":"replica stopped"}')
  t.equal((await h.sidecar.runs.records.get(scope, 'behind')).record.status, 'queued', 'the run behind it never got a slot')
  t.equal(app.requestsTo('/json').length, 0)
})

t.test('bounds: a body over ENVELOPE_MAX_BODY_BYTES fails the run with 502; a result over WEBHOOK_MAX_BODY_BYTES is delivered truncated', async t => {
  const app = await appFor(t)
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { ENVELOPE_MAX_BODY_BYTES: '64', WEBHOOK_MAX_BODY_BYTES: '16', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base })
  await client.submit('/json', 'too-big', { body: 'x'.repeat(100) })
  const tooBig = await client.finished('too-big')
  t.equal(tooBig.record.status, 'failed')
  t.equal(tooBig.record.status_code, 502)
  t.same(tooBig.record.result, { message: 'app unreachable: response body over ENVELOPE_MAX_BODY_BYTES (64 bytes)' })

  await client.submit(`/json?${hookQuery(receiver)}`, 'truncated', { body: 'y'.repeat(20) })
  const [delivery] = await receiver.waitForAttempts(1)
  const { record } = await client.finished('truncated')
  t.same(record.result, { method: 'POST', url: '/json', body: 'y'.repeat(20) }, 'the record keeps the whole result')
  t.equal(delivery?.body.toString(),
    `{"run_id":"truncated","status_code":200,"result":null,"run_time_ms":${record.run_time_ms},"timestamp":"${record.completed_at}","truncated":true}`)
})
