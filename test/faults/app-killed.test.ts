import { performance } from 'node:perf_hooks'
import t from 'tap'
import { WebSocket } from 'ws'
import { send } from '../helpers/http-client.ts'
import { eventually, freePort, type Harness, startHarness } from '../helpers/sidecar-harness.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { clientClosed, connectClient, nextMessage } from '../helpers/websocket-app.ts'
import { doneFrame, openStream } from '../stream/sse-test-kit.ts'
import { scrape } from '../helpers/admin-metrics.ts'
import { patient } from '../helpers/timing.ts'
import { assertLeakFree, type FaultApp, startFaultApp, type Tap, type Teardown } from './fault-kit.ts'

// The app container dies (SIGKILL of a real process) mid-request, mid-stream and mid-WebSocket.
// The caller gets a clean answer (502, an error event, a closed socket), the sidecar stays up and
// leak-free, and once the app is back on the same port calls succeed again.

let port: number
let h: Harness
let receiver: WebhookReceiver

t.before(async () => {
  port = await freePort()
  receiver = await startWebhookReceiver([], 200)
  h = await startHarness(`http://127.0.0.1:${port}`, { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_MAX_DELAY_MS: '50' })
})
t.teardown(async () => {
  await h.close()
  await receiver.close()
})

const hook = (): string => `webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}`
const logFor = (id: string): Array<Record<string, unknown>> => h.logs.filter(line => line.runId === id)

/** The app on the shared port, and the sidecar seeing it ready. */
async function appUp (t: Teardown): Promise<FaultApp> {
  const app = await startFaultApp(t, port)
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200, 5000)
  return app
}

/** After the app died: the sidecar notices, answers 502 at once, and serves again once the app is back. */
async function deadThenBack (t: Tap, what: string): Promise<void> {
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 503, 5000)
  t.equal((await send(`${h.admin}/readyz`)).status, 503, `${what}: /readyz turns 503 while the app is gone`)
  const started = performance.now()
  const refused = await send(`${h.base}/v4/proj/app/json`, { headers: { 'x-request-id': `${what}-dead` } })
  t.equal(refused.status, 502, 'a call while the app is gone gets 502')
  t.same(refused.json(), { message: 'app unreachable: connection refused' })
  t.equal(refused.headers['x-request-id'], `${what}-dead`)
  // the sidecar neither retries nor waits for readiness: only a hang could exceed the scaled bound
  t.ok(performance.now() - started < patient(2000), 'at once, not after a retry or a time-out')

  const app = await appUp(t)
  const back = await send(`${h.base}/v4/proj/app/json`)
  t.equal(back.status, 200, 'the app back on the same port: calls succeed again')
  t.same((back.json() as { result: unknown }).result, { ok: true, pid: app.child.process.pid })
  await assertLeakFree(t, h, `${what}, app back`)
  // read once: the app's readiness probe may open a connection of its own at any time
  let held = Infinity
  await eventually(async () => (held = await app.connections()) <= 1)
  t.ok(held <= 1, 'the restarted app holds at most the one pooled connection')
}

t.test('killed mid-request: the caller gets 502 JSON with its run id, the webhook reports 502', async t => {
  const app = await appUp(t)
  const id = 'killed-mid-request'
  const started = performance.now()
  const response = send(`${h.base}/v4/proj/app/slow?ms=60000&${hook()}`, { headers: { 'x-request-id': id } })
  await app.waitForSeen('/slow', id)
  const attemptsBefore = receiver.attempts.length
  await app.signal('SIGKILL')
  const answer = await response
  // the app would have answered after 60 s, far past patient(5000)
  t.ok(performance.now() - started < patient(5000), 'answered as soon as the app died, not when its answer was due')
  t.equal(answer.status, 502)
  t.equal(answer.headers['x-request-id'], id)
  t.equal(answer.headers['content-type'], 'application/json; charset=utf-8')
  t.same(answer.json(), { message: 'app unreachable: connection reset' })

  const [attempt] = (await receiver.waitForAttempts(attemptsBefore + 1)).slice(attemptsBefore)
  const body = JSON.parse(attempt?.body.toString() ?? '') as Record<string, unknown>
  t.same(Object.keys(body), ['run_id', 'status_code', 'result', 'run_time_ms', 'timestamp'])
  t.match(body, { run_id: id, status_code: 502, result: { message: 'app unreachable: connection reset' } })
  t.equal(attempt?.headers['x-request-id'], id)
  await eventually(() => logFor(id).length === 1)
  t.match(logFor(id), [{ method: 'GET', path: '/v4/proj/app/slow', status: 502 }])

  await assertLeakFree(t, h, 'killed mid-request')
  await deadThenBack(t, 'mid-request')
})

t.test('killed mid-stream: the caller\'s SSE stream ends with event: error after the events sent', async t => {
  const app = await appUp(t)
  const id = 'killed-mid-stream'
  const stream = await openStream(`${h.base}/v4/proj/app/ndjson?${hook()}`, { 'x-request-id': id })
  t.teardown(() => { stream.req.destroy() })
  t.equal(stream.status, 200)
  t.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(stream.headers['x-request-id'], id)
  await stream.waitForEvents(3)
  const attemptsBefore = receiver.attempts.length
  await app.signal('SIGKILL')
  await stream.done

  t.equal(stream.res.complete, true, 'the stream was ended properly, not cut')
  const events = stream.events.slice(0, -1)
  t.ok(events.length >= 3, `${events.length} events before the app died`)
  t.same(events.map(e => [e.event, e.data]), events.map((_e, i) => [undefined, `{"n":${i + 1}}`]), 'every line the app wrote, in order')
  const last = stream.events[stream.events.length - 1]
  t.equal(last?.event, 'error')
  const payload = JSON.parse(last?.data ?? '') as Record<string, unknown>
  t.same(Object.keys(payload), ['message'])
  t.match(payload.message, /^app failed mid-stream/)
  t.ok(stream.raw().endsWith(`event: error\ndata: ${last?.data ?? ''}\n\n${doneFrame(id)}`), 'the error event, then the run\'s done frame')

  const [attempt] = (await receiver.waitForAttempts(attemptsBefore + 1)).slice(attemptsBefore)
  const body = JSON.parse(attempt?.body.toString() ?? '') as { run_id: string, status_code: number, result: unknown }
  t.equal(body.run_id, id)
  t.equal(body.status_code, 200, 'a stream cut after it began reports 200')
  t.same(body.result, events.map(e => JSON.parse(e.data)), 'and the events the caller got')
  await eventually(() => logFor(id).length === 1)
  t.match(logFor(id), [{ path: '/v4/proj/app/ndjson', status: 200 }])

  await assertLeakFree(t, h, 'killed mid-stream')
  await deadThenBack(t, 'mid-stream')
})

t.test('killed mid-WebSocket: the caller\'s WebSocket closes (1006, no close frame)', async t => {
  const app = await appUp(t)
  const id = 'killed-mid-ws'
  const url = `ws://127.0.0.1:${h.sidecar.port}/v4/proj/app/ws`
  const outcome = await connectClient(url, [], { headers: { 'x-request-id': id } })
  if (outcome.kind !== 'open') throw new Error(`upgrade refused: ${outcome.status}`)
  const ws = outcome.ws
  t.teardown(() => { ws.terminate() })
  ws.on('error', () => {})
  await app.waitForSeen('ws /ws', id)
  const echoed = nextMessage(ws)
  ws.send('before')
  t.equal((await echoed).data.toString(), 'before')
  t.equal((await scrape(h)).sidecar_websocket_connections, 1)

  const closed = clientClosed(ws)
  const killedAt = performance.now()
  await app.signal('SIGKILL')
  const { code, reason } = await closed
  // the sidecar has no WebSocket ping timer: a missed close would be a hang, not a later close
  t.ok(performance.now() - killedAt < patient(3000), 'the close reaches the caller at once, not never')
  t.equal(code, 1006, 'abnormal closure: the app sent no close frame, the sidecar invents none')
  t.equal(reason, '')
  t.equal(ws.readyState, WebSocket.CLOSED)
  await eventually(() => h.logs.some(line => line.runId === id && line.msg === 'websocket'))
  t.match(h.logs.filter(line => line.runId === id), [{ msg: 'websocket', path: '/v4/proj/app/ws', status: 101 }])

  await assertLeakFree(t, h, 'killed mid-WebSocket')
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 503, 5000)
  const refused = await connectClient(url, [], { headers: { 'x-request-id': 'ws-dead' } })
  t.match(refused, { kind: 'refused', status: 502, body: '{"message":"app unreachable: connection refused"}' }, 'an upgrade while the app is gone gets 502')
  await deadThenBack(t, 'mid-WebSocket')

  const again = await connectClient(url)
  if (again.kind !== 'open') throw new Error('upgrade refused after the restart')
  t.teardown(() => { again.ws.terminate() })
  const reply = nextMessage(again.ws)
  again.ws.send('after')
  t.equal((await reply).data.toString(), 'after', 'a WebSocket through the sidecar works again')
  const closedAgain = clientClosed(again.ws)
  again.ws.close(1000, 'done')
  t.equal((await closedAgain).code, 1000)
  await assertLeakFree(t, h, 'WebSocket after the restart')
})

t.test('a sidecar, once closed, leaves no connection open to the app', async t => {
  const app = await startFaultApp(t)
  const local = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  t.teardown(() => local.close())
  const calls = await Promise.all(Array.from({ length: 5 }, async () => await send(`${local.base}/v4/proj/app/slow?ms=100`)))
  t.same(calls.map(c => c.status), [200, 200, 200, 200, 200])
  const pooled = await app.connections()
  t.ok(pooled >= 1 && pooled <= 6, `the pool keeps what the calls opened (${pooled}; a readiness probe may add one)`)
  await local.close()
  await eventually(async () => await app.connections() === 0)
  t.equal(await app.connections(), 0, 'none left once the sidecar closed')
})
