import { performance } from 'node:perf_hooks'
import t from 'tap'
import { WebSocket } from 'ws'
import { type SidecarProcess, startSidecarProcess } from '../helpers/sidecar-process.ts'
import { send } from '../helpers/http-client.ts'
import { patient, sleep } from '../helpers/timing.ts'
import { type ReceivedAttempt, type ReceiverAction, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { openStream, type OpenStream } from '../stream/sse-test-kit.ts'
import { echo, json, type MixedApp, type SeenRequest, startMixedApp } from '../sidecar/concurrency-kit.ts'

// SIGTERM on the real bin in a child process (issue 6, Lifecycle): /readyz turns 503 at once; open
// streams and WebSockets keep working and the process exits 0 as soon as they (and the webhook
// deliveries they left) are done, or when RESPONSE_GRACE_PERIOD_SECONDS cuts them.

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

/** The app: /stream sends an SSE event every 100 ms until `finish()` ends it; /json answers; WebSockets echo. */
interface StreamApp { app: MixedApp, streams: Array<{ seen: SeenRequest, finish: () => void }> }

async function startStreamApp (t: Tap): Promise<StreamApp> {
  const streams: StreamApp['streams'] = []
  const app = await startMixedApp(seen => {
    if (seen.path !== '/stream') { json(seen.res, { id: seen.id }); return }
    seen.res.writeHead(200, { 'content-type': 'text/event-stream' })
    let n = 0
    const write = (): void => { if (!seen.res.destroyed) seen.res.write(`data: {"n":${++n}}\n\n`) }
    write()
    const timer = setInterval(write, 100)
    seen.res.once('close', () => { clearInterval(timer) })
    streams.push({ seen, finish: () => { clearInterval(timer); seen.res.end('data: "last"\n\n') } })
  })
  t.teardown(() => app.close())
  return { app, streams }
}

/** The bin in front of `appUrl` (auth off, loopback webhooks allowed), ready. */
async function startChild (t: Tap, appUrl: string, env: Record<string, string>): Promise<SidecarProcess> {
  return await startSidecarProcess(t, { APP_URL: appUrl, DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', ...env })
}

async function openWs (t: Tap, url: string): Promise<WebSocket> {
  const ws = new WebSocket(url)
  t.teardown(() => { ws.terminate() })
  await new Promise<void>((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject) })
  ws.on('error', () => {})
  return ws
}

const closeOf = (ws: WebSocket): Promise<number> => new Promise(resolve => { ws.once('close', code => { resolve(code) }) })

async function openSse (t: Tap, url: string): Promise<OpenStream> {
  const stream = await openStream(url, { 'x-request-id': 'drain-stream' })
  t.teardown(() => { stream.req.destroy() })
  await stream.waitForEvents(1)
  return stream
}

t.test('SIGTERM with an SSE stream and a WebSocket open: /readyz 503 at once, both keep working, exit 0 once both end', async t => {
  const { app, streams } = await startStreamApp(t)
  const { child, base, admin, ws: wsBase, running } = await startChild(t, app.url, { RESPONSE_GRACE_PERIOD_SECONDS: '30' })
  const stream = await openSse(t, `${base}/v4/proj/app/stream`)
  const ws = await openWs(t, `${wsBase}/v4/proj/app/ws`)
  t.equal(await echo(ws, 'before'), 'before')

  child.process.kill('SIGTERM')
  await child.waitForLine(line => line.msg === 'draining')
  t.equal((await send(`${admin}/readyz`)).status, 503, '/readyz turns 503 at once')
  const eventsAtSignal = stream.events.length
  await stream.waitForEvents(eventsAtSignal + 3)
  t.ok(stream.events.length >= eventsAtSignal + 3, 'the stream keeps flowing after SIGTERM')
  t.equal(await echo(ws, 'during the drain'), 'during the drain', 'the WebSocket keeps working')
  t.equal((await send(`${base}/v4/proj/app/json`)).status, 200, 'new calls are still served')
  t.ok(running(), 'still running while the stream and the WebSocket are open')

  ;(streams[0] as StreamApp['streams'][number]).finish()
  await stream.done
  t.equal(stream.res.complete, true, 'the stream ended cleanly')
  t.equal(stream.events[stream.events.length - 1]?.data, '"last"')
  // only time shows the drain did not end: past its 500 ms quiet period, it would have without the WebSocket
  await sleep(800)
  t.ok(running(), 'still running while the WebSocket is open')
  t.equal(await echo(ws, 'last frame'), 'last frame')

  const closedAt = performance.now()
  ws.close(1000, 'bye')
  t.equal(await child.exited, 0, `exit 0 (stderr: ${child.stderr})`)
  const took = performance.now() - closedAt
  // after the 500 ms quiet period; patient(3000) = 12 s is far short of the 30 s grace period it excludes
  t.ok(took < patient(3000), `promptly once both ended, not at the grace period (${took.toFixed(0)} ms)`)
  t.match(child.lines.find(line => line.msg === 'stopped'), { clean: true })
  t.same(child.lines.filter(line => line.msg === 'websocket').map(line => line.status), [101])
})

t.test('SIGTERM: a webhook left pending by a stream that ends during the drain is delivered (once) before exit', async t => {
  const { app, streams } = await startStreamApp(t)
  const receiver: WebhookReceiver = await startWebhookReceiver([{ status: 200, delayMs: 1000 } satisfies ReceiverAction])
  t.teardown(() => receiver.close())
  // a grace period far past patient(6000) = 24 s, which the exit below must come before
  const { child, base } = await startChild(t, app.url, { RESPONSE_GRACE_PERIOD_SECONDS: '60' })
  const stream = await openSse(t, `${base}/v4/proj/app/stream?webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}`)

  child.process.kill('SIGTERM')
  await child.waitForLine(line => line.msg === 'draining')
  await stream.waitForEvents(3)
  const endedAt = performance.now()
  ;(streams[0] as StreamApp['streams'][number]).finish()
  await stream.done
  t.equal(await child.exited, 0, `exit 0 (stderr: ${child.stderr})`)
  const exitedAt = performance.now()

  t.equal(receiver.attempts.length, 1, 'the receiver got it exactly once')
  const attempt = receiver.attempts[0] as ReceivedAttempt
  t.type(attempt.endedAt, 'number', 'and answered it')
  t.ok((attempt.endedAt as number) <= exitedAt, 'before the process exited')
  t.ok(exitedAt - endedAt >= 800, `the process waited for the slow delivery (${(exitedAt - endedAt).toFixed(0)} ms)`)
  t.ok(exitedAt - endedAt < patient(6000), 'but not for the whole grace period')
  const body = JSON.parse(attempt.body.toString()) as { run_id: string, status_code: number, result: unknown[] }
  t.match(body, { run_id: 'drain-stream', status_code: 200 })
  t.same(body.result, stream.events.map(e => JSON.parse(e.data)), 'with the events the caller got')
  t.match(child.lines.find(line => line.msg === 'stopped'), { clean: true })
  t.equal(child.lines.filter(line => line.msg === 'webhook failed').length, 0)
})

t.test('RESPONSE_GRACE_PERIOD_SECONDS=0.5: an endless stream and an open WebSocket are cut at the grace period; exit 0', async t => {
  const { app } = await startStreamApp(t)
  const { child, base, ws: wsBase } = await startChild(t, app.url, { RESPONSE_GRACE_PERIOD_SECONDS: '0.5' })
  const stream = await openSse(t, `${base}/v4/proj/app/stream`)
  const ws = await openWs(t, `${wsBase}/v4/proj/app/ws`)
  const wsClosed = closeOf(ws)

  const signalledAt = performance.now()
  child.process.kill('SIGTERM')
  await stream.done
  const cutAfter = performance.now() - signalledAt
  // the stream is endless: only the grace period cuts it, so the upper bound excludes a hang
  t.ok(cutAfter >= 400 && cutAfter < patient(4000), `the stream was cut at the grace period, not never (${cutAfter.toFixed(0)} ms)`)
  t.equal(stream.res.complete, false, 'cut, not ended')
  t.ok(stream.events.length >= 3, 'it kept flowing until then')
  t.equal(await wsClosed, 1006, 'the WebSocket was cut too')
  t.equal(await child.exited, 0, `exit 0 (stderr: ${child.stderr})`)
  t.ok(performance.now() - signalledAt < patient(5000), 'and the process exits right after the cut, not never')
  t.match(child.lines.find(line => line.msg === 'stopped'), { clean: false })
  t.ok(child.lines.some(line => line.msg === 'grace period over; cutting what is left'))
})
