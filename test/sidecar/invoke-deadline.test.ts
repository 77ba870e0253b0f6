import { request } from 'node:http'
import { connect } from 'node:net'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { WebSocket } from 'ws'
import { send } from '../helpers/http-client.ts'
import { eventually, type Harness } from '../helpers/sidecar-harness.ts'
import { patient } from '../helpers/timing.ts'
import { type ReceivedAttempt, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { openStream } from '../stream/sse-test-kit.ts'
import { deliveriesFinished } from '../webhook/webhook-kit.ts'
import {
  echo, gauges, gaugesReach, invoke, json, type MixedApp, openWebSocket, type SeenRequest, sidecarFor, startMixedApp
} from './concurrency-kit.ts'

// DEADLINE_SECONDS (issue 6): a per-call timer from arrival, covering the wait in the queue and the
// run. Queued: 504, never reaches the app, no webhook. Forwarded, response not begun: the app
// request is aborted, 504, webhook status_code 504 with the error body. A stream that began ends
// with `event: error` and its webhook reports 200 and the events sent. WebSockets have no deadline.

const DEADLINE = 0.5
const DEADLINE_BODY = { message: `request exceeded its deadline of ${DEADLINE}s` }

/** Writes `line(n)` every 100 ms until the response closes. */
function drip (seen: SeenRequest, contentType: string, line: (n: number) => string): void {
  seen.res.writeHead(200, { 'content-type': contentType })
  let n = 0
  const write = (): void => { if (!seen.res.destroyed) seen.res.write(line(++n)) }
  write()
  const timer = setInterval(write, 100)
  seen.res.once('close', () => { clearInterval(timer) })
}

/**
 * The app, by path: /hang never answers; /stall sends JSON headers and half a body, then stalls;
 * /slow answers after 100 ms; /ndjson, /sse and /text write a piece every 100 ms forever;
 * /ndjson-short writes three lines 50 ms apart and ends. WebSockets are echoed.
 */
let app: MixedApp
t.before(async () => {
  app = await startMixedApp(seen => {
    switch (seen.path) {
      case '/hang': return
      case '/stall':
        seen.res.writeHead(200, { 'content-type': 'application/json', 'content-length': '20' })
        seen.res.write('{"half":')
        return
      case '/slow':
        setTimeout(() => { json(seen.res, { slow: true }) }, 100)
        return
      case '/ndjson':
        drip(seen, 'application/x-ndjson', n => `{"n":${n}}\n`)
        return
      case '/sse':
        drip(seen, 'text/event-stream', n => `data: {"n":${n}}\n\n`)
        return
      case '/text':
        drip(seen, 'text/plain', n => `piece ${n};`)
        return
      case '/ndjson-short': {
        seen.res.writeHead(200, { 'content-type': 'application/x-ndjson' })
        const lines = ['{"n":1}\n', '{"n":2}\n', '{"n":3}\n']
        const next = (): void => {
          const line = lines.shift()
          if (line === undefined) seen.res.end()
          else { seen.res.write(line); setTimeout(next, 50) }
        }
        next()
        return
      }
      default: json(seen.res, { id: seen.id })
    }
  })
})
t.teardown(() => app.close())

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

async function setup (t: Tap, env: Record<string, string> = {}): Promise<{ h: Harness, receiver: WebhookReceiver, hook: string }> {
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const h = await sidecarFor(t, app.url, { DEADLINE_SECONDS: String(DEADLINE), WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', ...env })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  return { h, receiver, hook: `${receiver.url}/hook` }
}

const seenAs = (id: string): SeenRequest | undefined => app.seen.find(s => s.id === id)
// the apps here hang or stall: only the deadline ends a call, so the ceiling (scaled for a loaded machine) excludes a hang
const within = (ms: number): boolean => ms >= DEADLINE * 1000 * 0.4 && ms <= patient(DEADLINE * 1000 * 3)

/** The one webhook for `runId`, parsed, once every delivery has finished. */
async function webhookFor (h: Harness, receiver: WebhookReceiver, runId: string): Promise<Record<string, unknown>> {
  await eventually(() => receiver.attempts.some(a => a.headers['x-request-id'] === runId) && h.sidecar.webhooks.pending === 0)
  const attempts = receiver.attempts.filter(a => a.headers['x-request-id'] === runId)
  if (attempts.length !== 1) throw new Error(`${attempts.length} webhooks for ${runId}`)
  return JSON.parse((attempts[0] as ReceivedAttempt).body.toString()) as Record<string, unknown>
}

t.test('a plain call to an app that never answers: 504 after the deadline, the app request aborted, webhook 504', async t => {
  const { h, receiver, hook } = await setup(t)
  const sentAt = performance.now()
  const r = await invoke(h, '/hang', 'd-hang', hook)
  const took = performance.now() - sentAt
  t.equal(r.status, 504)
  t.equal(r.text, '{"message":"request exceeded its deadline of 0.5s"}')
  t.match(r.headers['content-type'], /^application\/json/)
  t.equal(r.headers['x-request-id'], 'd-hang')
  t.ok(within(took), `after about the deadline (${took.toFixed(0)} ms)`)

  await eventually(() => seenAs('d-hang')?.closed === true)
  t.notOk(seenAs('d-hang')?.res.writableFinished, 'the app saw its request closed, unanswered')
  const body = await webhookFor(h, receiver, 'd-hang')
  t.same(Object.keys(body).sort(), ['result', 'run_id', 'run_time_ms', 'status_code', 'timestamp'])
  t.match(body, { run_id: 'd-hang', status_code: 504, result: DEADLINE_BODY })
  t.type(body.run_time_ms, 'number')
  t.same(await gauges(h), { inflight: 0, queued: 0 })
  t.match(h.logs.find(l => l.msg === 'request' && l.runId === 'd-hang'), { status: 504 })
})

t.test('cortex: headers sent but the body stalls past the deadline: 504 (the caller had nothing yet), webhook 504', async t => {
  const { h, receiver, hook } = await setup(t)
  const sentAt = performance.now()
  const r = await invoke(h, '/stall', 'd-stall', hook)
  const took = performance.now() - sentAt
  t.equal(r.status, 504)
  t.same(r.json(), DEADLINE_BODY)
  t.ok(within(took), `after about the deadline (${took.toFixed(0)} ms)`)
  await eventually(() => seenAs('d-stall')?.closed === true)
  t.match(await webhookFor(h, receiver, 'd-stall'), { run_id: 'd-stall', status_code: 504, result: DEADLINE_BODY })
})

t.test('a call waiting in the queue past its deadline: 504, never reaches the app, no webhook', async t => {
  const { h, receiver, hook } = await setup(t, { REPLICA_CONCURRENCY: '1' })
  // a WebSocket holds the only slot: it has no deadline of its own, so it outlives the queued call
  const ws = await openWebSocket(t, h, '/holder', 'd-holder')
  const sentAt = performance.now()
  const r = await invoke(h, '/json', 'd-queued', hook)
  const took = performance.now() - sentAt
  t.equal(r.status, 504)
  t.same(r.json(), DEADLINE_BODY)
  t.equal(r.headers['x-request-id'], 'd-queued')
  t.ok(within(took), `after about the deadline (${took.toFixed(0)} ms)`)
  t.same(await gauges(h), { inflight: 1, queued: 0 }, 'it left the queue; the WebSocket still holds its slot')
  t.equal(seenAs('d-queued'), undefined, 'it never reached the app')

  ws.close()
  await gaugesReach(h, { inflight: 0 })
  const after = await invoke(h, '/json', 'd-after')
  t.equal(after.status, 200, 'the slot is free again')
  // once its access line is out the sidecar is done with the call: a webhook it handed over would now be pending or counted
  await eventually(() => h.logs.some(l => l.msg === 'request' && l.runId === 'd-queued'))
  t.equal(h.sidecar.webhooks.pending, 0)
  t.equal(await deliveriesFinished(h), 0, 'none was handed over')
  t.equal(receiver.connections(), 0, 'no webhook for the queued call')
  t.equal(seenAs('d-queued'), undefined)
})

t.test('an NDJSON stream that runs past the deadline: the events sent, then event: error, the end; webhook 200 with the events', async t => {
  const { h, receiver, hook } = await setup(t)
  const stream = await openStream(`${h.base}/v4/proj/app/ndjson?webhookEndpoint=${encodeURIComponent(hook)}`, { 'x-request-id': 'd-ndjson' })
  t.teardown(() => { stream.req.destroy() })
  t.equal(stream.status, 200)
  await stream.done
  const took = performance.now() - stream.sentAt
  t.ok(within(took), `ended after about the deadline (${took.toFixed(0)} ms)`)
  const last = stream.events[stream.events.length - 1]
  t.equal(last?.event, 'error', 'the last event is an error event')
  t.same(JSON.parse(last?.data ?? 'null'), DEADLINE_BODY)
  const sent = stream.events.slice(0, -1)
  t.ok(sent.length >= 1, `events were sent before it (${sent.length})`)
  t.same(sent.map(e => e.event), sent.map(() => undefined), 'only the last one is an error')
  t.same(sent.map(e => JSON.parse(e.data)), sent.map((_, i) => ({ n: i + 1 })), 'in order, none lost')
  await eventually(() => seenAs('d-ndjson')?.closed === true)
  t.notOk(seenAs('d-ndjson')?.res.writableFinished, 'the app request was cut')

  const body = await webhookFor(h, receiver, 'd-ndjson')
  t.match(body, { run_id: 'd-ndjson', status_code: 200 })
  t.same(body.result, sent.map(e => JSON.parse(e.data)), 'the webhook reports exactly the events sent')
})

t.test('an SSE stream (passthrough) that runs past the deadline ends the same way', async t => {
  const { h, receiver, hook } = await setup(t)
  const stream = await openStream(`${h.base}/v4/proj/app/sse?webhookEndpoint=${encodeURIComponent(hook)}`, { 'x-request-id': 'd-sse' })
  t.teardown(() => { stream.req.destroy() })
  await stream.done
  t.ok(within(performance.now() - stream.sentAt))
  const last = stream.events[stream.events.length - 1]
  t.equal(last?.event, 'error')
  t.equal(last?.data, JSON.stringify(DEADLINE_BODY))
  const sent = stream.events.slice(0, -1)
  t.ok(sent.length >= 1)
  t.same(sent.map(e => JSON.parse(e.data)), sent.map((_, i) => ({ n: i + 1 })))
  const body = await webhookFor(h, receiver, 'd-sse')
  t.match(body, { run_id: 'd-sse', status_code: 200 })
  t.same(body.result, sent.map(e => JSON.parse(e.data)))
})

t.test('RUNTIME=custom: a passthrough body that started and runs past the deadline has its connection cut', async t => {
  const { h } = await setup(t, { RUNTIME: 'custom' })
  const sentAt = performance.now()
  const outcome = await new Promise<{ status: number, body: string, complete: boolean, took: number }>((resolve, reject) => {
    const req = request(`${h.base}/v4/proj/app/text`, { agent: false, headers: { 'x-request-id': 'd-custom' } }, res => {
      let body = ''
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk })
      res.on('error', () => {})
      res.once('close', () => { resolve({ status: res.statusCode as number, body, complete: res.complete, took: performance.now() - sentAt }) })
    })
    req.on('error', reject)
    req.end()
  })
  t.equal(outcome.status, 200, 'the app status had gone out')
  t.match(outcome.body, /^piece 1;/, 'and some of its body')
  t.equal(outcome.complete, false, 'then the connection was cut: no clean end')
  t.ok(within(outcome.took), `at about the deadline (${outcome.took.toFixed(0)} ms)`)
  await eventually(() => seenAs('d-custom')?.closed === true)
  t.same(await gauges(h), { inflight: 0, queued: 0 })
})

t.test('calls that finish within the deadline are untouched', async t => {
  const { h, receiver, hook } = await setup(t)
  const plain = await invoke(h, '/slow', 'd-quick', hook)
  t.equal(plain.status, 200)
  t.same((plain.json() as { result: unknown }).result, { slow: true })
  const stream = await openStream(`${h.base}/v4/proj/app/ndjson-short?webhookEndpoint=${encodeURIComponent(hook)}`, { 'x-request-id': 'd-short' })
  await stream.done
  t.same(stream.events.map(e => [e.event, e.data]), [[undefined, '{"n":1}'], [undefined, '{"n":2}'], [undefined, '{"n":3}']], 'no error event')
  // let their deadlines pass (nothing may happen to calls that already ended): a call sent after
  // both ended gets its 504 only after theirs would have fired
  t.equal((await invoke(h, '/hang', 'd-witness')).status, 504)
  t.match(await webhookFor(h, receiver, 'd-quick'), { status_code: 200, result: { slow: true } })
  t.match(await webhookFor(h, receiver, 'd-short'), { status_code: 200, result: [{ n: 1 }, { n: 2 }, { n: 3 }] })
  const lines = h.logs.filter(l => l.msg === 'request' && l.runId !== 'd-witness')
  t.same(lines.map(l => [l.runId, l.status, l.aborted]), [['d-quick', 200, undefined], ['d-short', 200, undefined]], 'one clean line each')
})

t.test('a WebSocket stays open past DEADLINE_SECONDS and frames still pass', async t => {
  const { h } = await setup(t, { DEADLINE_SECONDS: '0.3' })
  const ws = await openWebSocket(t, h, '/ws', 'd-ws')
  t.equal(await echo(ws, 'before'), 'before')
  // a call sent after the WebSocket opened gets its 504 only once the WebSocket's deadline would have passed
  t.equal((await invoke(h, '/hang', 'd-ws-witness')).status, 504)
  await eventually(() => h.logs.some(l => l.msg === 'request' && l.runId === 'd-ws-witness'))
  t.equal(ws.readyState, WebSocket.OPEN, 'still open well past the deadline')
  t.equal(await echo(ws, 'after'), 'after', 'frames still pass both ways')
  t.same(await gauges(h), { inflight: 1, queued: 0 })
  ws.close()
  await gaugesReach(h, { inflight: 0 })
})

t.test('the deadline passes while the request body is still arriving: 504, and the slot is not lost', async t => {
  const { h } = await setup(t, { REPLICA_CONCURRENCY: '1', DEADLINE_SECONDS: '0.3' })
  const socket = connect(h.sidecar.port, '127.0.0.1')
  t.teardown(() => { socket.destroy() })
  let answer = ''
  let closed = false
  socket.setEncoding('latin1').on('data', (text: string) => { answer += text })
  socket.on('error', () => {})
  socket.on('close', () => { closed = true })
  socket.write('POST /v4/proj/app/json HTTP/1.1\r\nHost: sidecar\r\nX-Request-Id: d-upload\r\nContent-Length: 10\r\n\r\n12345')
  await eventually(() => answer.includes('\r\n\r\n{'))
  t.match(answer, /^HTTP\/1\.1 504 /)
  t.match(answer, /x-request-id: d-upload\r\n/i)
  t.ok(answer.endsWith('{"message":"request exceeded its deadline of 0.3s"}'))
  // the rest of the body arrives after the answer: it must not take (and keep) the only slot
  socket.write('67890')
  // the sidecar has moved past those bytes once it answers a request sent behind them (or closes the connection)
  socket.write('GET /nowhere HTTP/1.1\r\nHost: sidecar\r\n\r\n')
  await eventually(() => closed || answer.includes('HTTP/1.1 404 '))
  const r = await invoke(h, '/json', 'd-next')
  t.equal(r.status, 200, 'the next call gets the slot (not a 504 after waiting for a lost one)')
  t.same(await gauges(h), { inflight: 0, queued: 0 })
  t.equal(seenAs('d-upload'), undefined, 'the expired upload never reached the app')
})
