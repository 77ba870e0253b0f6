import { performance } from 'node:perf_hooks'
import t from 'tap'
import { send, type SentResponse } from '../helpers/http-client.ts'
import { eventually } from '../helpers/sidecar-harness.ts'
import { patient, sleep } from '../helpers/timing.ts'
import { freePort } from '../helpers/ports.ts'
import { closedPort, startWebhookReceiver } from '../helpers/webhook-receiver.ts'
import { openStream } from '../stream/sse-test-kit.ts'
import {
  abandonable, echo, gauges, gaugesReach, invoke, json, openWebSocket, type SeenRequest, settledFlag, sidecarFor,
  startMixedApp, watchArrivals
} from './concurrency-kit.ts'

// REPLICA_CONCURRENCY / QUEUE_DEPTH (issue 6): at most N calls at the app, the rest wait first come,
// first served; a full queue is 503 with Retry-After; streams and WebSockets hold their slot until
// they end; until the app is first ready, calls wait instead of failing.

type Envelope = { run_id: string, result: unknown }

t.test('500 concurrent callers, REPLICA_CONCURRENCY=4: never more than 4 at the app, all 200, first come first served', async t => {
  const total = 500
  let holding = 0
  let maxHolding = 0
  const app = await startMixedApp(seen => {
    holding++
    maxHolding = Math.max(maxHolding, holding)
    setTimeout(() => {
      holding--
      json(seen.res, { id: seen.id })
    }, 5 + Math.random() * 15)
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '4', QUEUE_DEPTH: String(total) })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const arrivals = watchArrivals(h)

  // each request starts only once the sidecar took in the one before: arrival order is 0, 1, 2, …
  const responses: Array<Promise<SentResponse>> = []
  for (let n = 0; n < total; n++) {
    const arrived = arrivals.next()
    responses.push(invoke(h, '/work', `r-${n}`))
    await arrived
  }
  t.equal(arrivals.count(), total)
  const answered = await Promise.all(responses)

  t.equal(answered.filter(r => r.status === 200).length, total, 'every request answered 200')
  t.equal(answered.filter((r, n) => r.headers['x-request-id'] === `r-${n}` && (r.json() as Envelope).run_id === `r-${n}` &&
    (r.json() as { result: { id: string } }).result.id === `r-${n}`).length, total, 'each caller got its own answer')
  t.equal(maxHolding, 4, 'the app held exactly 4 at its busiest, never more')

  const order = app.ids('/work').map(id => Number(id.slice(2)))
  t.equal(order.length, total, 'each request reached the app once')
  t.same([...order].sort((a, b) => a - b), Array.from({ length: total }, (_, n) => n))
  t.same([...order.slice(0, 4)].sort((a, b) => a - b), [0, 1, 2, 3], 'the first 4 slots went to the first 4 arrivals')
  // Slots are granted strictly in arrival order; two calls granted in the same tick travel on two
  // connections, so the app may see those in either order: nobody moves by 4 places or more.
  const displaced = order.map((n, rank) => Math.abs(n - rank))
  t.ok(Math.max(...displaced) <= 3, `no call overtook or fell behind by a full round of slots (max displacement ${Math.max(...displaced)})`)
  const backwards = order.slice(4).filter((n, i) => n < (order[i + 3] as number)).length
  t.ok(backwards <= total / 10, `the order at the app is essentially increasing (${backwards} local swaps)`)
  t.same(await gauges(h), { inflight: 0, queued: 0 }, 'nothing held or waiting afterwards')
})

t.test('FIFO, exactly: with the app releasing one call at a time, calls reach it in arrival order', async t => {
  const total = 24
  const held: SeenRequest[] = []
  const app = await startMixedApp(seen => { held.push(seen) })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '4' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const arrivals = watchArrivals(h)
  const responses: Array<Promise<SentResponse>> = []
  for (let n = 0; n < total; n++) {
    const arrived = arrivals.next()
    responses.push(invoke(h, '/fifo', `f-${n}`))
    await arrived
    // the first four go straight to the app: wait for each, so even their order is known
    if (n < 4) await eventually(() => app.seen.length === n + 1)
  }
  await gaugesReach(h, { inflight: 4, queued: total - 4 })
  for (let released = 0; released < total; released++) {
    const oldest = held.shift() as SeenRequest
    json(oldest.res, { id: oldest.id })
    if (released + 4 < total) await eventually(() => app.seen.length === released + 5)
    t.equal(held.length, Math.min(4, total - released - 1), 'one out, one in')
  }
  t.same(app.ids(), Array.from({ length: total }, (_, n) => `f-${n}`), 'the app saw exactly the arrival order')
  t.same((await Promise.all(responses)).map(r => r.status), Array(total).fill(200))
  t.same(await gauges(h), { inflight: 0, queued: 0 })
})

t.test('QUEUE_DEPTH=10, concurrency 1: the 12th concurrent call is 503 with Retry-After and no webhook', async t => {
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  let hold = true
  const held: SeenRequest[] = []
  const app = await startMixedApp(seen => {
    if (hold) held.push(seen)
    else json(seen.res, { id: seen.id })
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1', QUEUE_DEPTH: '10', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const hook = `${receiver.url}/hook`

  const first = invoke(h, '/q', 'q-0', hook)
  await eventually(() => held.length === 1)
  const queued = Array.from({ length: 10 }, (_, n) => invoke(h, '/q', `q-${n + 1}`, hook))
  await gaugesReach(h, { queued: 10 })
  t.same(await gauges(h), { inflight: 1, queued: 10 }, '/metrics: 1 held, 10 waiting')

  const refused = await invoke(h, '/q', 'q-11', hook)
  t.equal(refused.status, 503)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['x-request-id'], 'q-11')
  t.match(refused.headers['content-type'], /^application\/json/)
  t.same(Object.keys(refused.json() as object), ['message'])
  t.type((refused.json() as { message: unknown }).message, 'string')
  t.same(app.ids(), ['q-0'], 'only the held call reached the app')
  t.same(await gauges(h), { inflight: 1, queued: 10 }, 'the refused call never counted')

  hold = false
  json((held[0] as SeenRequest).res, { id: 'q-0' })
  const answered = await Promise.all([first, ...queued])
  t.same(answered.map(r => r.status), Array(11).fill(200))
  t.same(app.ids(), Array.from({ length: 11 }, (_, n) => `q-${n}`), 'the waiting calls went in arrival order')
  t.same(await gauges(h), { inflight: 0, queued: 0 }, '0 after')

  await eventually(() => h.sidecar.webhooks.pending === 0 && receiver.attempts.length >= 11)
  const runIds = receiver.attempts.map(a => a.headers['x-request-id'] as string).sort()
  t.same(runIds, Array.from({ length: 11 }, (_, n) => `q-${n}`).sort(), 'one webhook per call that reached the app, none for the 503')
})

t.test('a queued caller that disconnects leaves the queue and never reaches the app', async t => {
  const held: SeenRequest[] = []
  const app = await startMixedApp(seen => {
    if (seen.id === 'hold') held.push(seen)
    else json(seen.res, { id: seen.id })
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)

  const first = invoke(h, '/d', 'hold')
  await eventually(() => held.length === 1)
  const gone = abandonable(`${h.base}/v4/proj/app/d`, 'gone')
  await gaugesReach(h, { queued: 1 })
  const stays = invoke(h, '/d', 'stays')
  await gaugesReach(h, { queued: 2 })
  gone.abort()
  t.equal(await gone.response, 'ECONNRESET')
  await gaugesReach(h, { queued: 1 })
  t.same(await gauges(h), { inflight: 1, queued: 1 }, 'the queued gauge dropped by one')

  json((held[0] as SeenRequest).res, { id: 'hold' })
  t.equal((await first).status, 200)
  t.equal((await stays).status, 200)
  t.same(app.ids(), ['hold', 'stays'], 'the one that left never reached the app')
  t.same(await gauges(h), { inflight: 0, queued: 0 })
  await eventually(() => h.logs.some(line => line.msg === 'request' && line.runId === 'gone'))
  t.match(h.logs.find(line => line.msg === 'request' && line.runId === 'gone'), { status: 499, aborted: true })
})

t.test('an open SSE stream holds its slot until it ends', async t => {
  let endStream: (() => void) | undefined
  const app = await startMixedApp(seen => {
    if (seen.path === '/stream') {
      seen.res.writeHead(200, { 'content-type': 'text/event-stream' })
      seen.res.write('data: {"n":1}\n\n')
      endStream = () => { seen.res.end('data: {"n":2}\n\n') }
    } else {
      json(seen.res, { id: seen.id })
    }
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)

  const stream = await openStream(`${h.base}/v4/proj/app/stream`, { 'x-request-id': 'stream' })
  t.teardown(() => { stream.req.destroy() })
  await stream.waitForEvents(1)
  const waiting = invoke(h, '/plain', 'after-stream')
  const settled = settledFlag(waiting)
  await gaugesReach(h, { inflight: 1, queued: 1 })
  await sleep(200) // nothing in the sidecar ticks while a call rightly waits for its slot: only time shows it keeps waiting
  t.notOk(settled(), 'the call waits while the stream is open')
  t.same(app.ids(), ['stream'], 'and has not reached the app')

  ;(endStream as () => void)()
  await stream.done
  t.same(stream.events.map(e => e.data), ['{"n":1}', '{"n":2}'])
  const r = await waiting
  t.equal(r.status, 200)
  t.same(app.ids(), ['stream', 'after-stream'])
  t.same(await gauges(h), { inflight: 0, queued: 0 })
})

t.test('an open WebSocket holds its slot until it closes', async t => {
  const app = await startMixedApp(seen => { json(seen.res, { id: seen.id }) })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)

  const ws = await openWebSocket(t, h, '/ws', 'ws-1')
  t.equal(await echo(ws, 'hello'), 'hello')
  t.same(await gauges(h), { inflight: 1, queued: 0 }, 'the WebSocket counts as in flight')
  const waiting = invoke(h, '/plain', 'after-ws')
  const settled = settledFlag(waiting)
  await gaugesReach(h, { queued: 1 })
  await sleep(200) // nothing in the sidecar ticks while a call rightly waits for its slot: only time shows it keeps waiting
  t.notOk(settled(), 'the call waits while the WebSocket is open')
  t.same(app.ids('/plain'), [], 'and has not reached the app')
  t.equal(await echo(ws, 'still open'), 'still open')

  ws.close(1000, 'done')
  const r = await waiting
  t.equal(r.status, 200)
  t.same((r.json() as { result: unknown }).result, { id: 'after-ws' })
  await gaugesReach(h, { inflight: 0, queued: 0 })
})

t.test('readiness: before the app first listens, calls wait (no 502) and go through once it does', async t => {
  const port = await freePort()
  const h = await sidecarFor(t, `http://127.0.0.1:${port}`, {}, { notReadyWarningMs: 50 })
  const calls = ['w-0', 'w-1', 'w-2'].map(id => invoke(h, '/early', id))
  const settled = calls.map(settledFlag)
  await gaugesReach(h, { queued: 3, inflight: 0 })
  t.equal((await send(`${h.admin}/readyz`)).status, 503, '/readyz 503 while the app is down')
  // two warnings 50 ms apart: the probe (every 20 ms) failed again in between, and the sidecar still holds the calls
  const warnings = (): number => h.logs.filter(line => line.msg === 'calls are waiting for the app to be ready' && line.waiting === 3).length
  await eventually(() => warnings() >= 2)
  t.same(settled.map(s => s()), [false, false, false], 'the calls wait instead of failing')
  t.same(await gauges(h), { inflight: 0, queued: 3 }, 'readiness waiters count as queued')

  const late = await startMixedApp(seen => { json(seen.res, { id: seen.id }) }, port)
  t.teardown(() => late.close())
  const answered = await Promise.all(calls)
  t.same(answered.map(r => r.status), [200, 200, 200])
  t.same(answered.map(r => (r.json() as { result: unknown }).result), [{ id: 'w-0' }, { id: 'w-1' }, { id: 'w-2' }])
  t.same(late.ids(), ['w-0', 'w-1', 'w-2'], 'in arrival order')
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  t.same(await gauges(h), { inflight: 0, queued: 0 })
})

t.test('readiness: with DEADLINE_SECONDS=0.5 and the app never ready, the call is 504 after about 0.5 s', async t => {
  const port = await closedPort()
  const h = await sidecarFor(t, `http://127.0.0.1:${port}`, { DEADLINE_SECONDS: '0.5' })
  const sentAt = performance.now()
  const r = await invoke(h, '/never', 'never-ready')
  const took = performance.now() - sentAt
  t.equal(r.status, 504)
  t.same(r.json(), { message: 'request exceeded its deadline of 0.5s' })
  t.equal(r.headers['x-request-id'], 'never-ready')
  // the app never gets ready: only the 0.5 s deadline ends the call; a scaled ceiling excludes a hang
  t.ok(took >= 200 && took <= patient(1500), `after about the deadline (${took.toFixed(0)} ms)`)
  t.same(await gauges(h), { inflight: 0, queued: 0 }, 'the waiter left the queue')
  t.equal((await send(`${h.admin}/readyz`)).status, 503)
})

t.test('readiness: past APP_READY_TIMEOUT_SECONDS with the app never ready, a waiting call is 503 app not ready; a call after the app is ready waits for nothing', async t => {
  const port = await freePort()
  const h = await sidecarFor(t, `http://127.0.0.1:${port}`, { APP_READY_TIMEOUT_SECONDS: '0.3' })
  const r = await invoke(h, '/never', 'not-ready-1')
  t.equal(r.status, 503)
  t.same(r.json(), { message: 'app not ready' })
  t.equal(r.headers['retry-after'], '5')
  t.equal(r.headers['x-request-id'], 'not-ready-1')
  const line = h.logs.find(l => l.runId === 'not-ready-1' && l.msg === 'request')
  t.equal(line?.error, 'SIDECAR_APP_NOT_READY')
  t.equal(line?.reason, 'app not ready within APP_READY_TIMEOUT_SECONDS (0.3 s)')
  t.same(await gauges(h), { inflight: 0, queued: 0 }, 'the waiter left the queue')

  const late = await startMixedApp(seen => { json(seen.res, { id: seen.id }) }, port)
  t.teardown(() => late.close())
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const ready = await invoke(h, '/now', 'ready-1')
  t.equal(ready.status, 200, 'once ready, the bound no longer applies')
})

t.test('readiness: READYCHECK_PATH answering 503 then 200 gates calls the same way; HEALTHCHECK_PATH drives /healthz', async t => {
  let ready = false
  const app = await startMixedApp(seen => {
    if (seen.path === '/ready') json(seen.res, { ready }, ready ? 200 : 503)
    else if (seen.path === '/health') json(seen.res, { ok: true })
    else json(seen.res, { id: seen.id })
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { READYCHECK_PATH: '/ready', HEALTHCHECK_PATH: '/health' })
  await eventually(async () => (await send(`${h.admin}/healthz`)).status === 200)
  t.equal((await send(`${h.admin}/healthz`)).status, 200, '/healthz follows the health path')
  t.ok(app.ids('/ready').length >= 1, 'the ready path was probed')
  t.equal((await send(`${h.admin}/readyz`)).status, 503, '/readyz follows the ready path')

  const call = invoke(h, '/gated', 'gated')
  const settled = settledFlag(call)
  await gaugesReach(h, { queued: 1 })
  // two more probes reach the app: the first one's 503 was taken in before the second was sent
  const probes = app.ids('/ready').length
  await eventually(() => app.ids('/ready').length >= probes + 2)
  t.notOk(settled(), 'the call waits while the ready path answers 503')
  t.same(app.ids('/gated'), [], 'and has not reached the app')

  ready = true
  const r = await call
  t.equal(r.status, 200)
  t.same((r.json() as { result: unknown }).result, { id: 'gated' })
  t.equal((await send(`${h.admin}/readyz`)).status, 200)
  t.same(await gauges(h), { inflight: 0, queued: 0 })
})
