import type { ServerResponse } from 'node:http'
import { createParser, type EventSourceMessage } from 'eventsource-parser'
import t, { type Test } from 'tap'
import { verifyWebhook } from '../../src/webhook/webhook-signature.ts'
import { fetchMetrics, sampleValue } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, freePort, type Harness, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { startWebhookReceiver } from '../helpers/webhook-receiver.ts'

/** An app whose `/hold` requests wait until released; `/stream` writes NDJSON lines on demand; `/fail` answers 500. */
async function startApp (t: Test): Promise<TestServer & { held: ServerResponse[], streams: ServerResponse[] }> {
  const held: ServerResponse[] = []
  const streams: ServerResponse[] = []
  const app = await startTestServer((req, res, body) => {
    if (req.url?.startsWith('/hold')) { held.push(res); return }
    if (req.url?.startsWith('/stream')) {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' })
      streams.push(res)
      return
    }
    if (req.url?.startsWith('/fail')) { res.writeHead(500, { 'content-type': 'text/plain' }).end('boom'); return }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ echo: body.toString(), url: req.url }))
  })
  t.teardown(() => app.close())
  return Object.assign(app, { held, streams })
}

async function harness (t: Test, appUrl: string, env: Record<string, string> = {}): Promise<Harness> {
  const h = await startHarness(appUrl, { DISABLE_AUTH: 'true', ...env })
  t.teardown(() => h.close())
  return h
}

async function record (h: Harness, runId: string, project = 'p', app = 'a'): Promise<Record<string, unknown>> {
  return (await send(`${h.base}/v4/${project}/${app}/_runs/${runId}`)).json() as Record<string, unknown>
}

async function finished (h: Harness, runId: string): Promise<Record<string, unknown>> {
  let last: Record<string, unknown> = {}
  await eventually(async () => {
    last = await record(h, runId)
    return !['queued', 'running'].includes(last.status as string)
  })
  return last
}

/** Reads an SSE response whole: its events with id/event/data. */
async function readEvents (url: string, headers: Record<string, string> = {}): Promise<{ status: number, headers: Headers, events: EventSourceMessage[] }> {
  const response = await fetch(url, { headers })
  const events: EventSourceMessage[] = []
  const parser = createParser({ onEvent: event => { events.push(event) } })
  parser.feed(await response.text())
  return { status: response.status, headers: response.headers, events }
}

t.test('?async=true: 202 at once, the app gets the request a sync call would send, the record ends succeeded', async t => {
  const app = await startApp(t)
  const h = await startHarness(app.url, {})
  t.teardown(() => h.close())
  const token = await h.token('proj')
  const submitted = await send(`${h.base}/v4/proj/app/echo?x=1&async=true&y=2`, {
    method: 'POST', headers: { authorization: `Bearer ${token}`, 'x-request-id': 'async-run-1', 'content-type': 'application/json', prefer: 'respond-async, return=minimal' }, body: '{"n":1}'
  })
  t.equal(submitted.status, 202)
  t.equal(submitted.text, '{"run_id":"async-run-1","status":"queued"}')
  t.equal(submitted.headers.location, '/v4/proj/app/_runs/async-run-1')
  t.equal(submitted.headers['x-request-id'], 'async-run-1')
  await eventually(() => app.requests.length === 1)
  const seen = app.requests[0]
  t.equal(seen?.method, 'POST')
  t.equal(seen?.url, '/echo?x=1&y=2')
  t.equal(seen?.headers['x-request-id'], 'async-run-1')
  t.equal(seen?.headers.authorization, undefined, 'the checked token is not forwarded')
  t.equal(seen?.headers.prefer, 'return=minimal', 'respond-async was for the sidecar')
  const readRecord = async (): Promise<Record<string, unknown>> =>
    (await send(`${h.base}/v4/proj/app/_runs/async-run-1`, { headers: { authorization: `Bearer ${token}` } })).json() as Record<string, unknown>
  await eventually(async () => (await readRecord()).status === 'succeeded')
  const done = await readRecord()
  t.same(Object.keys(done), ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'result'])
  t.same(done.result, { echo: '{"n":1}', url: '/echo?x=1&y=2' })
  t.equal(done.status_code, 200)
  t.equal((await send(`${h.base}/v4/proj/app/_runs/async-run-1`)).status, 401, 'the record needs a token too')
  t.equal((await send(`${h.base}/v4/proj/app/_runs/async-run-1`, { headers: { authorization: `Bearer ${await h.token('other')}` } })).status, 403)
  const elsewhere = await send(`${h.base}/v4/proj/other-app/_runs/async-run-1`, { headers: { authorization: `Bearer ${token}` } })
  t.equal(elsewhere.status, 404)
  t.equal(elsewhere.text, '{"message":"no such run"}')
  const reused = await send(`${h.base}/v4/proj/app/echo?async=true`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'x-request-id': 'async-run-1' } })
  t.equal(reused.status, 409)
  t.equal(reused.text, '{"message":"a run with this id already exists"}')
  const metrics = await fetchMetrics(h.admin)
  t.equal(sampleValue(metrics, 'sidecar_runs_total', { status: 'succeeded' }), 1)
  t.equal(sampleValue(metrics, 'sidecar_async_queued_runs'), 0)
})

t.test('failures: a non-2xx answer, an unreachable app, the deadline', async t => {
  const app = await startApp(t)
  const h = await harness(t, app.url, { DEADLINE_SECONDS: '0.3' })
  const fail = await send(`${h.base}/v4/p/a/fail?async=true`, { method: 'POST' })
  const failed = await finished(h, fail.headers['x-request-id'] as string)
  t.equal(failed.status, 'failed')
  t.equal(failed.status_code, 500)
  t.equal(failed.result, 'boom')
  t.same(failed.error, { message: 'app answered 500' })
  const hold = await send(`${h.base}/v4/p/a/hold?async=true`, { method: 'POST' })
  const late = await finished(h, hold.headers['x-request-id'] as string)
  t.equal(late.status, 'failed')
  t.equal(late.status_code, 504)
  t.same(late.result, { message: 'request exceeded its deadline of 0.3s' })

  const gone = await harness(t, `http://127.0.0.1:${await freePort()}`)
  // the gate opens once the app is first ready: an app that never was keeps runs queued
  const queued = await send(`${gone.base}/v4/p/a/x?async=true`, { method: 'POST' })
  t.equal((await record(gone, queued.headers['x-request-id'] as string)).status, 'queued')
  t.equal(sampleValue(await fetchMetrics(gone.admin), 'sidecar_async_queued_runs'), 1)
})

t.test('a streamed answer: events recorded as they arrive, followed live, resumed, then done', async t => {
  const app = await startApp(t)
  const h = await harness(t, app.url, { RUN_MAX_EVENTS: '3' })
  const submitted = await send(`${h.base}/v4/p/a/stream`, { method: 'POST', headers: { prefer: 'respond-async', 'x-request-id': 'streamed' } })
  t.equal(submitted.status, 202)
  await eventually(() => app.streams.length === 1)
  const stream = app.streams[0] as ServerResponse
  stream.write('{"token":"a"}\n')
  const live = await fetch(`${h.base}/v4/p/a/_runs/streamed/events`)
  t.equal(live.headers.get('content-type'), 'text/event-stream; charset=utf-8')
  t.equal(live.headers.get('cache-control'), 'no-cache')
  const reader = (live.body as unknown as ReadableStream<Uint8Array>).pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>).getReader()
  t.equal((await reader.read()).value, 'id: 0\ndata: {"token":"a"}\n\n')
  const writtenAt = performance.now()
  stream.write('{"token":"b"}\n')
  t.equal((await reader.read()).value, 'id: 1\ndata: {"token":"b"}\n\n')
  t.ok(performance.now() - writtenAt < 200, 'a live event arrives at once')
  const resumed = fetch(`${h.base}/v4/p/a/_runs/streamed/events`, { headers: { 'last-event-id': '0' } }).then(async r => await r.text())
  stream.write('line\n{"token":"c"}\n{"token":"d"}\n')
  stream.end()
  let rest = ''
  for (let read = await reader.read(); read.done !== true; read = await reader.read()) rest += read.value
  t.match(rest, /^id: 2\ndata: line\n\nid: 3\ndata: \{"token":"c"\}\n\nid: 4\ndata: \{"token":"d"\}\n\nevent: done\ndata: \{"run_id":"streamed","status":"succeeded",/)
  const done = await finished(h, 'streamed')
  t.same(done.result, [{ token: 'a' }, { token: 'b' }, 'line', { token: 'c' }, { token: 'd' }])
  t.match(await resumed, /^(id: 1\n|event: error\ndata: \{"message":"events before 2 are no longer kept"\}\n\nid: 2\n)/)
  const late = await readEvents(`${h.base}/v4/p/a/_runs/streamed/events?after=0`)
  t.same(late.events.map(e => [e.event, e.id, e.data]), [
    ['error', undefined, '{"message":"events before 2 are no longer kept"}'],
    [undefined, '2', 'line'], [undefined, '3', '{"token":"c"}'], [undefined, '4', '{"token":"d"}'],
    ['done', undefined, JSON.stringify(done)]
  ])
  const byHeader = await readEvents(`${h.base}/v4/p/a/_runs/streamed/events?after=0`, { 'last-event-id': '3' })
  t.same(byHeader.events.map(e => e.id ?? e.event), ['4', 'done'], 'Last-Event-ID wins over ?after=')
  for (const [headers, query, message] of [
    [{ 'last-event-id': 'x' }, '', 'Last-Event-ID must be an event number (0, 1, 2, …)'],
    [{}, '?after=-1', 'after must be an event number (0, 1, 2, …)'],
    [{}, '?after=5', 'event 5 does not exist: the last event is 4']
  ] as const) {
    const refused = await send(`${h.base}/v4/p/a/_runs/streamed/events${query}`, { headers })
    t.equal(refused.status, 400)
    t.equal(refused.text, JSON.stringify({ message }))
  }
})

t.test('cancel: a queued run never reaches the app; a running one is cut within 1 s and its webhook says 499', async t => {
  const app = await startApp(t)
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const h = await harness(t, app.url, { REPLICA_CONCURRENCY: '1', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const hook = `webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}`
  await send(`${h.base}/v4/p/a/hold?async=true&${hook}`, { method: 'POST', headers: { 'x-request-id': 'running', 'x-webhook-secret': 'sekret' } })
  await send(`${h.base}/v4/p/a/echo?async=true&${hook}`, { method: 'POST', headers: { 'x-request-id': 'waiting' } })
  await eventually(() => app.held.length === 1)
  t.equal((await record(h, 'waiting')).status, 'queued')
  const queuedCancel = await send(`${h.base}/v4/p/a/_runs/waiting/cancel`, { method: 'POST' })
  t.equal(queuedCancel.status, 200)
  const canceledQueued = queuedCancel.json() as Record<string, unknown>
  t.same(Object.keys(canceledQueued), ['run_id', 'status', 'created_at', 'completed_at', 'error', 'webhook'])
  t.same(canceledQueued.webhook, { status: 'pending', attempts: 0 })
  const appClosed = new Promise(resolve => (app.held[0] as ServerResponse).once('close', resolve))
  const canceledAt = performance.now()
  const runningCancel = await send(`${h.base}/v4/p/a/_runs/running/cancel`, { method: 'POST' })
  t.equal(runningCancel.status, 200)
  t.equal((runningCancel.json() as { status: string }).status, 'canceled')
  await appClosed
  t.ok(performance.now() - canceledAt < 1000, 'the app request is aborted within 1 s')
  const [delivery] = await receiver.waitForAttempts(1)
  const body = JSON.parse(delivery?.body.toString() ?? '{}') as Record<string, unknown>
  t.equal(body.run_id, 'running')
  t.equal(body.status_code, 499)
  t.same(body.result, { message: 'run canceled' })
  t.ok(verifyWebhook('sekret', delivery?.headers ?? {}, delivery?.body ?? ''))
  await eventually(async () => ((await record(h, 'running')).webhook as { status: string }).status === 'delivered')
  t.same((await record(h, 'running')).webhook, { status: 'delivered', attempts: 1 })
  t.notMatch(JSON.stringify(h.logs), 'sekret', 'the secret is never logged')
  t.equal(app.requests.filter(r => r.url.startsWith('/echo')).length, 0, 'the queued run never reached the app')
  t.equal(receiver.attempts.length, 1, 'no webhook for the run canceled before it started')
  const again = await send(`${h.base}/v4/p/a/_runs/running/cancel`, { method: 'POST' })
  t.equal(again.status, 409)
  t.equal(again.text, '{"message":"run already finished"}')
  const metrics = await fetchMetrics(h.admin)
  t.equal(sampleValue(metrics, 'sidecar_runs_total', { status: 'canceled' }), 2)
})

t.test('sync calls waiting for a slot go before queued async runs', async t => {
  const app = await startApp(t)
  const h = await harness(t, app.url, { REPLICA_CONCURRENCY: '1' })
  const first = send(`${h.base}/v4/p/a/hold/sync-1`)
  await eventually(() => app.held.length === 1)
  await send(`${h.base}/v4/p/a/hold/async?async=true`, { method: 'POST' })
  const second = send(`${h.base}/v4/p/a/hold/sync-2`)
  await eventually(async () => sampleValue(await fetchMetrics(h.admin), 'sidecar_queued_requests') === 1)
  ;(app.held[0] as ServerResponse).writeHead(200).end('{}')
  await eventually(() => app.held.length === 2)
  t.equal(app.requests[1]?.url, '/hold/sync-2', 'the waiting sync call went first')
  ;(app.held[1] as ServerResponse).writeHead(200).end('{}')
  await eventually(() => app.held.length === 3)
  t.equal(app.requests[2]?.url, '/hold/async')
  ;(app.held[2] as ServerResponse).writeHead(200).end('{}')
  await Promise.all([first, second])
})

t.test('bad input: nothing is queued', async t => {
  const app = await startApp(t)
  const h = await harness(t, app.url, { MAX_BODY_BYTES: '10', ASYNC_QUEUE_DEPTH: '1' })
  const tooLarge = await send(`${h.base}/v4/p/a/x?async=true`, { method: 'POST', body: 'x'.repeat(11), headers: { 'x-request-id': 'big' } })
  t.equal(tooLarge.status, 413)
  const chunked = await send(`${h.base}/v4/p/a/x?async=true`, { method: 'POST', body: ['x'.repeat(6), 'x'.repeat(6)], headers: { 'x-request-id': 'chunked' } })
  t.equal(chunked.status, 413)
  const badHook = await send(`${h.base}/v4/p/a/x?async=true&webhookEndpoint=ftp%3A%2F%2Fx`, { method: 'POST', headers: { 'x-request-id': 'badhook' } })
  t.equal(badHook.status, 400)
  for (const id of ['big', 'chunked', 'badhook']) t.equal((await send(`${h.base}/v4/p/a/_runs/${id}`)).status, 404, id)
  t.equal((await send(`${h.base}/v4/p/a/_runs/bad.id`)).text, '{"message":"malformed run id: run ids match [A-Za-z0-9_-]{1,128}"}')
  t.equal((await send(`${h.base}/v4/p/a/_runs/x/y`)).status, 404)
  t.equal((await send(`${h.base}/v4/p/a/_runs/`)).status, 404)
  const wrongMethod = await send(`${h.base}/v4/p/a/_runs/x/cancel`)
  t.equal(wrongMethod.status, 405)
  t.equal(wrongMethod.headers.allow, 'POST')
  t.equal(app.requests.length, 0, '_runs never reaches the app')
})

t.test('ASYNC_QUEUE_DEPTH: one more is 503 with Retry-After, not recorded', async t => {
  const h = await harness(t, `http://127.0.0.1:${await freePort()}`, { ASYNC_QUEUE_DEPTH: '1' })
  t.equal((await send(`${h.base}/v4/p/a/x?async=true`, { method: 'POST' })).status, 202)
  const full = await send(`${h.base}/v4/p/a/x?async=true`, { method: 'POST', headers: { 'x-request-id': 'overflow' } })
  t.equal(full.status, 503)
  t.equal(full.headers['retry-after'], '1')
  t.equal(full.text, '{"message":"too many async runs waiting"}')
  t.equal((await send(`${h.base}/v4/p/a/_runs/overflow`)).status, 404)
})

t.test('drain (memory store): queued runs still run in the grace period; a run cut at its end fails "replica stopped"', async t => {
  const app = await startApp(t)
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1' })
  t.teardown(() => h.jwks.close()) // drain closes the sidecar itself
  await send(`${h.base}/v4/p/a/echo?async=true`, { method: 'POST', headers: { 'x-request-id': 'before' } })
  await eventually(async () => (await record(h, 'before')).status === 'succeeded')
  await send(`${h.base}/v4/p/a/hold?async=true`, { method: 'POST', headers: { 'x-request-id': 'held' } })
  await send(`${h.base}/v4/p/a/echo?async=true`, { method: 'POST', headers: { 'x-request-id': 'queued' } })
  await eventually(() => app.held.length === 1)
  const views: Record<string, unknown> = {}
  const drained = h.sidecar.drain(1)
  setTimeout(() => {
    void h.sidecar.runs.get({ projectId: 'p', appName: 'a' }, 'held').then(view => { views.held = view.record.status })
  }, 300)
  t.equal(await drained, false, 'a run was cut')
  const held = await h.sidecar.runs.get({ projectId: 'p', appName: 'a' }, 'held')
  t.equal(views.held, 'running')
  t.equal(held.record.status, 'failed')
  t.equal(held.record.status_code, 503)
  t.same(held.record.error, { message: 'replica stopped' })
  t.equal(held.resultJson, '{"message":"replica stopped"}')
  t.equal((await h.sidecar.runs.get({ projectId: 'p', appName: 'a' }, 'queued')).record.status, 'queued', 'the queued run waited behind the held one')
})
