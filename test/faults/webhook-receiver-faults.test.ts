import t from 'tap'
import { scrape } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, type Harness, type LogLine, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { patient } from '../helpers/timing.ts'
import { closedPort, type ReceiverAction, startWebhookReceiver } from '../helpers/webhook-receiver.ts'
import { assertLeakFree, delta, type Tap } from './fault-kit.ts'

// The webhook receiver misbehaves: refuses connections, hangs past WEBHOOK_TIMEOUT_MS, resets,
// answers 404 then 200. The caller's response is never affected; the attempts, the final
// "webhook failed" line and the metrics say what happened; nothing stays pending.

const TIMEOUT_MS = 300
/**
 * WEBHOOK_TIMEOUT_MS of the forty deliveries at once: a refused or reset attempt among them, on a
 * loaded machine, can take longer than 300 ms to fail, and would be counted a time-out.
 */
const ALL_AT_ONCE_TIMEOUT_MS = 1000
let app: TestServer
let h: Harness

t.before(async () => {
  app = await startTestServer((_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"answer":42}') })
  h = await startHarness(app.url, {
    DISABLE_AUTH: 'true',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8',
    WEBHOOK_ATTEMPTS: '3',
    WEBHOOK_MAX_DELAY_MS: '50',
    WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS)
  })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
})
t.teardown(async () => {
  await h.close()
  await app.close()
})

/** Makes one call with a webhook to `endpoint` and checks that the caller's answer is the plain 200, given before its webhook is over. */
async function callWith (t: Tap, endpoint: string, id: string): Promise<{ pendingAtAnswer: number }> {
  const answer = await send(`${h.base}/v4/proj/app/run?webhookEndpoint=${encodeURIComponent(endpoint)}`, {
    method: 'POST', headers: { 'x-request-id': id, 'x-webhook-secret': 'whsec_faults' }, body: '{}'
  })
  const pendingAtAnswer = h.sidecar.webhooks.pending
  t.equal(answer.status, 200, 'the caller gets 200')
  t.equal(answer.headers['x-request-id'], id)
  const body = answer.json() as Record<string, unknown>
  t.same(Object.keys(body), ['run_id', 'result', 'run_time_ms', 'timestamp'])
  t.match(body, { run_id: id, result: { answer: 42 } })
  t.equal(pendingAtAnswer, 1, 'promptly: answered while its webhook is still under way')
  return { pendingAtAnswer }
}

const failedLines = (id: string): LogLine[] => h.logs.filter(line => line.msg === 'webhook failed' && line.runId === id)

async function settle (id: string): Promise<void> {
  await eventually(() => failedLines(id).length > 0 || h.sidecar.webhooks.pending === 0, 10_000)
  await eventually(() => h.sidecar.webhooks.pending === 0, 10_000)
}

t.test('refused (nothing listens): 3 attempts, then one "webhook failed" line with outcome connection refused', async t => {
  const port = await closedPort()
  const before = await scrape(h)
  const { pendingAtAnswer } = await callWith(t, `http://127.0.0.1:${port}/hook`, 'wh-refused')
  t.equal(pendingAtAnswer, 1, 'the delivery is still under way when the caller has its answer')
  await settle('wh-refused')
  t.same(failedLines('wh-refused').map(({ runId, host, attempts, outcome, level }) => ({ runId, host, attempts, outcome, level })),
    [{ runId: 'wh-refused', host: `127.0.0.1:${port}`, attempts: 3, outcome: 'connection refused', level: 40 }])
  t.same(delta(before, await scrape(h), 'sidecar_webhook_'), {
    'sidecar_webhook_attempts_total{outcome="network"}': 3,
    'sidecar_webhook_deliveries_total{result="failed"}': 1
  })
  await assertLeakFree(t, h, 'refused')
})

t.test(`hanging past WEBHOOK_TIMEOUT_MS (${TIMEOUT_MS}): each attempt is cut at the time-out, 3 in all, outcome timeout`, async t => {
  const receiver = await startWebhookReceiver(['hang'])
  t.teardown(() => receiver.close())
  const before = await scrape(h)
  const { pendingAtAnswer } = await callWith(t, `${receiver.url}/hook`, 'wh-hang')
  t.equal(pendingAtAnswer, 1)
  t.equal(receiver.attempts.filter(a => a.endedAt !== undefined).length, 0, 'the caller had its answer before any attempt ended')
  await settle('wh-hang')
  t.equal(receiver.attempts.length, 3, 'three attempts')
  t.ok(receiver.connections() >= 3, 'each on a fresh connection (a timed-out one is not reused)')
  await eventually(() => receiver.openConnections() === 0)
  t.equal(receiver.openConnections(), 0, 'no connection is left open to the hung receiver')
  for (const [i, attempt] of receiver.attempts.entries()) {
    t.type(attempt.endedAt, 'number', `attempt ${i + 1}: the sidecar closed it`)
    // the outcome "timeout" (counted below) proves the time-out cut it; held runs from the request's
    // arrival, which a loaded machine delays by any amount, so only a hang is excluded here
    const held = (attempt.endedAt as number) - attempt.arrivedAt
    t.ok(held < patient(TIMEOUT_MS + 1500), `attempt ${i + 1}: cut at the time-out, not never (${held.toFixed(0)} ms)`)
  }
  t.same(receiver.attempts.map(a => a.body.toString()), Array(3).fill(receiver.attempts[0]?.body.toString()), 'the same body each time')
  t.match(failedLines('wh-hang'), [{ runId: 'wh-hang', host: `127.0.0.1:${receiver.port}`, attempts: 3, outcome: 'timeout' }])
  t.equal(failedLines('wh-hang').length, 1)
  t.same(delta(before, await scrape(h), 'sidecar_webhook_'), {
    'sidecar_webhook_attempts_total{outcome="timeout"}': 3,
    'sidecar_webhook_deliveries_total{result="failed"}': 1
  })
  await assertLeakFree(t, h, 'hanging receiver')
})

t.test('resetting the connection: 3 attempts, outcome connection reset', async t => {
  const receiver = await startWebhookReceiver(['reset'])
  t.teardown(() => receiver.close())
  const before = await scrape(h)
  await callWith(t, `${receiver.url}/hook`, 'wh-reset')
  await settle('wh-reset')
  t.equal(receiver.attempts.length, 3)
  t.equal(receiver.connections(), 3, 'a reset connection is not reused')
  await eventually(() => receiver.openConnections() === 0)
  t.equal(receiver.openConnections(), 0)
  t.same(failedLines('wh-reset').map(({ attempts, outcome }) => ({ attempts, outcome })), [{ attempts: 3, outcome: 'connection reset' }])
  t.same(delta(before, await scrape(h), 'sidecar_webhook_'), {
    'sidecar_webhook_attempts_total{outcome="network"}': 3,
    'sidecar_webhook_deliveries_total{result="failed"}': 1
  })
  await assertLeakFree(t, h, 'resetting receiver')
})

t.test('404 then 200: retried once, delivered, no failure logged', async t => {
  const receiver = await startWebhookReceiver([404, 200])
  t.teardown(() => receiver.close())
  const before = await scrape(h)
  await callWith(t, `${receiver.url}/hook`, 'wh-404')
  await settle('wh-404')
  t.equal(receiver.attempts.length, 2, 'two attempts')
  const [first, second] = receiver.attempts
  t.equal(first?.body.toString(), second?.body.toString(), 'the same body')
  t.match(JSON.parse(second?.body.toString() ?? ''), { run_id: 'wh-404', status_code: 200, result: { answer: 42 } })
  t.equal(second?.headers['x-request-id'], 'wh-404')
  t.match(second?.headers['x-service-webhook-signature'], /^v1,[0-9a-f]{64}$/, 'signed')
  t.same(failedLines('wh-404'), [])
  t.equal(receiver.openConnections(), 1, 'one kept-alive connection, reused for the second attempt')
  t.equal(receiver.connections(), 1)
  t.same(delta(before, await scrape(h), 'sidecar_webhook_'), {
    'sidecar_webhook_attempts_total{outcome="404"}': 1,
    'sidecar_webhook_attempts_total{outcome="2xx"}': 1,
    'sidecar_webhook_deliveries_total{result="delivered"}': 1
  })
  await assertLeakFree(t, h, '404 then 200')
})

t.test('hang, then reset, then 200: the last attempt delivers it', async t => {
  const script: ReceiverAction[] = ['hang', 'reset', 200]
  const receiver = await startWebhookReceiver(script)
  t.teardown(() => receiver.close())
  const before = await scrape(h)
  await callWith(t, `${receiver.url}/hook`, 'wh-mixed')
  await settle('wh-mixed')
  t.equal(receiver.attempts.length, 3)
  t.same(receiver.attempts.map(a => a.action), script)
  t.same(failedLines('wh-mixed'), [])
  t.same(delta(before, await scrape(h), 'sidecar_webhook_'), {
    'sidecar_webhook_attempts_total{outcome="timeout"}': 1,
    'sidecar_webhook_attempts_total{outcome="network"}': 1,
    'sidecar_webhook_attempts_total{outcome="2xx"}': 1,
    'sidecar_webhook_deliveries_total{result="delivered"}': 1
  })
  await assertLeakFree(t, h, 'hang, reset, 200')
})

t.test('all four faults at once, ten calls each: every caller answered promptly, every delivery accounted for', async t => {
  const h = await startHarness(app.url, {
    DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_ATTEMPTS: '3', WEBHOOK_MAX_DELAY_MS: '50', WEBHOOK_TIMEOUT_MS: String(ALL_AT_ONCE_TIMEOUT_MS)
  })
  let closed = false
  t.teardown(async () => { if (!closed) await h.close() })
  const port = await closedPort()
  const hanging = await startWebhookReceiver(['hang'])
  const resetting = await startWebhookReceiver(['reset'])
  const flaky = await startWebhookReceiver([], 200)
  t.teardown(async () => { await Promise.all([hanging.close(), resetting.close(), flaky.close()]) })
  const endpoints = [`http://127.0.0.1:${port}/hook`, `${hanging.url}/hook`, `${resetting.url}/hook`, `${flaky.url}/hook`]
  const before = await scrape(h)
  const answers = await Promise.all(Array.from({ length: 40 }, async (_x, i) =>
    await send(`${h.base}/v4/proj/app/run?webhookEndpoint=${encodeURIComponent(endpoints[i % 4] as string)}`, { headers: { 'x-request-id': `wh-all-${i}` } })))
  t.same(answers.map(a => a.status), Array(40).fill(200))
  t.equal(hanging.attempts.filter(a => a.endedAt !== undefined).length, 0, 'all 40 answered before any attempt to the hanging receiver was cut')
  t.ok(h.sidecar.webhooks.pending > 0, 'while deliveries are still under way')
  await eventually(() => h.sidecar.webhooks.pending === 0, 15_000)
  t.equal(hanging.attempts.length, 30)
  t.equal(resetting.attempts.length, 30)
  t.equal(flaky.attempts.length, 10)
  const failed = h.logs.filter(line => line.msg === 'webhook failed' && String(line.runId).startsWith('wh-all-'))
  t.equal(failed.length, 30, 'one line per failed delivery')
  const outcomes: Record<string, number> = {}
  for (const line of failed) outcomes[String(line.outcome)] = (outcomes[String(line.outcome)] ?? 0) + 1
  t.same(outcomes, { 'connection refused': 10, timeout: 10, 'connection reset': 10 })
  t.same(delta(before, await scrape(h), 'sidecar_webhook_'), {
    'sidecar_webhook_attempts_total{outcome="network"}': 60,
    'sidecar_webhook_attempts_total{outcome="timeout"}': 30,
    'sidecar_webhook_attempts_total{outcome="2xx"}': 10,
    'sidecar_webhook_deliveries_total{result="failed"}': 30,
    'sidecar_webhook_deliveries_total{result="delivered"}': 10
  })
  await assertLeakFree(t, h, 'all faults at once')
  // undici keeps idle connections (one per delivery that ran at once) until its keep-alive time-out
  t.ok(hanging.openConnections() + resetting.openConnections() + flaky.openConnections() <= 30, 'at most the keep-alive pool is left open')
  closed = true
  await h.close()
  await eventually(() => hanging.openConnections() + resetting.openConnections() + flaky.openConnections() === 0)
  t.same([hanging.openConnections(), resetting.openConnections(), flaky.openConnections()], [0, 0, 0], 'none once the sidecar closed')
})
