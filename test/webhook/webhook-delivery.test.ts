import { getEventListeners } from 'node:events'
import pino from 'pino'
import t from 'tap'
import { SidecarMetrics } from '../../src/metrics/metrics.ts'
import { AddressGuard } from '../../src/webhook/address-guard.ts'
import { CONNECTIONS_PER_DESTINATION } from '../../src/webhook/destination-pools.ts'
import { type WebhookJob, WebhookDelivery } from '../../src/webhook/webhook-delivery.ts'
import { eventually, type Harness, type LogLine, type TestServer } from '../helpers/sidecar-harness.ts'
import { closedPort, type ReceivedAttempt, type ReceiverAction, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { watchTimers } from '../helpers/timing.ts'
import { call, deliveriesFinished, linesWith, LOOPBACK_ENV, sidecarFor, startWebhookApp, wait, webhookCounts, type WebhookCounts } from './webhook-kit.ts'

// The seed's retry table, row by row, through a real sidecar and a real receiver on loopback.
// Each test has its own sidecar, so the metrics it reads are exactly its own.

const MAX_DELAY = 100

let app: TestServer
t.before(async () => { app = await startWebhookApp() })
t.teardown(() => app.close())

interface Row {
  h: Harness
  receiver: WebhookReceiver
  runId: string
  endpoint: string
  attempts: ReceivedAttempt[]
  failures: LogLine[]
  counts: WebhookCounts
  /**
   * What the delivery asked its timers for, in ms: the pauses between attempts (p-retry's) and each
   * attempt's time-out. A loaded machine makes them fire late; what they were set to is the sidecar's.
   */
  pauses: number[]
  timeouts: number[]
}

/** Records, until `t` ends, the timers the retries (p-retry) and the attempts (webhook-attempt.ts) set. */
function recordTimers (t: Tap): { pauses: number[], timeouts: number[] } {
  const recorded = { pauses: [] as number[], timeouts: [] as number[] }
  watchTimers(t, (ms, stackOf) => {
    const stack = stackOf()
    // an attempt made by a retry has p-retry below it on its stack too: the attempt's time-out is told apart first
    if (stack.includes('/webhook-attempt.')) recorded.timeouts.push(ms)
    else if (stack.includes('/p-retry/')) recorded.pauses.push(ms)
    return undefined
  })
  return recorded
}

let runs = 0

/** One call with a webhook to a receiver answering `script`; waits until the delivery is finished. */
async function row (t: Tap, script: ReceiverAction[], env: Record<string, string> = {}, endpoint?: (receiver: WebhookReceiver) => string): Promise<Row> {
  const receiver = await startWebhookReceiver(script)
  t.teardown(() => receiver.close())
  const h = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_MAX_DELAY_MS: String(MAX_DELAY), ...env })
  const runId = `row-${++runs}`
  const url = endpoint?.(receiver) ?? `${receiver.url}/hook?src=sidecar`
  const timers = recordTimers(t)
  const r = await call(h, '/json', url, { headers: { 'x-request-id': runId } })
  t.equal(r.status, 200, 'the caller is answered normally whatever the webhook does')
  t.same((r.json() as { result: unknown }).result, { answer: 42, list: [1, 'two'] })
  await eventually(async () => await deliveriesFinished(h) === 1, 15_000)
  await wait(80) // nothing more may arrive once the delivery is over
  const attempts = [...receiver.attempts]
  for (const [i, attempt] of attempts.entries()) {
    t.equal(attempt.method, 'POST', `attempt ${i + 1}: POST`)
    t.equal(attempt.url, '/hook?src=sidecar', `attempt ${i + 1}: path and query as given`)
    t.equal(attempt.headers['content-type'], 'application/json', `attempt ${i + 1}: JSON`)
    t.equal(attempt.headers['x-request-id'], runId, `attempt ${i + 1}: X-Request-Id is the run id`)
    t.equal(attempt.body.toString(), attempts[0]?.body.toString(), `attempt ${i + 1}: the same body every time`)
    t.equal((JSON.parse(attempt.body.toString()) as { run_id: string }).run_id, runId)
  }
  return { h, receiver, runId, endpoint: url, attempts, failures: linesWith(h.logs, 'webhook failed'), counts: await webhookCounts(h), ...timers }
}

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

/** Each pause between the end of one attempt and the start of the next: set to at most the max delay, and > 0 as it passed. */
function checkPauses (t: Tap, r: Row, maxDelay = MAX_DELAY): void {
  const { attempts, pauses } = r
  // a pause of 0 sets no timer at all
  if (maxDelay > 0) t.equal(pauses.length, Math.max(0, attempts.length - 1), 'a pause before each attempt after the first')
  for (let i = 1; i < attempts.length; i++) {
    const pause = (attempts[i] as ReceivedAttempt).arrivedAt - ((attempts[i - 1] as ReceivedAttempt).endedAt as number)
    const set = pauses[i - 1] ?? 0
    t.ok(set <= maxDelay, `pause ${i} (set to ${set} ms, ${pause.toFixed(1)} ms as it passed) is at most ${maxDelay} ms`)
    // a retry that did not wait at all would come back within a millisecond or two on loopback
    if (maxDelay > 0) t.ok(pause >= Math.min(20, maxDelay / 2), `pause ${i} (${pause.toFixed(1)} ms) is a real pause`)
  }
}

function checkFailure (t: Tap, r: Row, attempts: number, outcome: string): void {
  t.equal(r.failures.length, 1, 'exactly one "webhook failed" line')
  const line = r.failures[0] as LogLine
  t.equal(line.runId, r.runId)
  t.equal(line.host, new URL(r.endpoint).host)
  t.equal(line.attempts, attempts)
  t.equal(line.outcome, outcome)
}


/** A WebhookDelivery to loopback receivers (no pause between attempts to speak of), closed at `t`'s teardown. */
function loopbackDelivery (t: Tap, attempts: number, timeoutMs: number): WebhookDelivery {
  const delivery = new WebhookDelivery({
    attempts,
    maxDelayMs: 1,
    timeoutMs,
    brand: 'Sidecar',
    guard: new AddressGuard([{ address: '127.0.0.0', prefix: 8, family: 4 }]),
    metrics: new SidecarMetrics(),
    logger: pino({ level: 'silent' })
  })
  t.teardown(() => delivery.close())
  return delivery
}

t.test('2xx at the first try: 1 attempt, delivered', async t => {
  for (const status of [200, 201, 202, 204, 299]) {
    const r = await row(t, [status])
    t.equal(r.attempts.length, 1, `${status}: one attempt`)
    t.same(r.counts, { attempts: { '2xx': 1 }, deliveries: { delivered: 1 } }, `${status}: metrics`)
    t.equal(r.failures.length, 0, `${status}: no failure logged`)
  }
})

t.test('404, 404, 200: retried, 3 attempts, delivered', async t => {
  const r = await row(t, [404, 404, 200])
  t.equal(r.attempts.length, 3)
  checkPauses(t, r)
  t.same(r.counts, { attempts: { 404: 2, '2xx': 1 }, deliveries: { delivered: 1 } })
  t.equal(r.failures.length, 0)
})

t.test('404 every time, WEBHOOK_ATTEMPTS=3: 3 attempts, failed with "status 404"', async t => {
  const r = await row(t, [404], { WEBHOOK_ATTEMPTS: '3' })
  t.equal(r.attempts.length, 3)
  checkPauses(t, r)
  checkFailure(t, r, 3, 'status 404')
  t.same(r.counts, { attempts: { 404: 3 }, deliveries: { failed: 1 } })
})

t.test('other 4xx: 1 attempt, permanent failure', async t => {
  for (const status of [400, 401, 403, 405, 410, 422, 429]) {
    const r = await row(t, [status, 200])
    t.equal(r.attempts.length, 1, `${status}: not retried`)
    checkFailure(t, r, 1, `status ${status}`)
    t.same(r.counts, { attempts: { '4xx': 1 }, deliveries: { failed: 1 } }, `${status}: metrics`)
  }
})

t.test('5xx: 1 attempt, no retry (avoids duplicate side effects)', async t => {
  for (const status of [500, 502, 503, 504]) {
    const r = await row(t, [status, 200])
    t.equal(r.attempts.length, 1, `${status}: not retried`)
    checkFailure(t, r, 1, `status ${status}`)
    t.same(r.counts, { attempts: { '5xx': 1 }, deliveries: { failed: 1 } }, `${status}: metrics`)
  }
})

t.test('3xx: retried, and the Location is never followed', async t => {
  const target = await startWebhookReceiver([200])
  t.teardown(() => target.close())
  for (const status of [301, 302, 303, 307, 308]) {
    const redirect = { status, headers: { location: `${target.url}/elsewhere` } }
    const r = await row(t, [redirect])
    t.equal(r.attempts.length, 3, `${status}: all 3 attempts`)
    checkPauses(t, r)
    checkFailure(t, r, 3, `status ${status}`)
    t.same(r.counts, { attempts: { other: 3 }, deliveries: { failed: 1 } }, `${status}: metrics`)
  }
  const recovered = await row(t, [{ status: 302, headers: { location: `${target.url}/elsewhere` } }, 200])
  t.equal(recovered.attempts.length, 2, 'a 3xx then a 2xx: delivered on the second attempt')
  t.same(recovered.counts, { attempts: { other: 1, '2xx': 1 }, deliveries: { delivered: 1 } })
  t.equal(target.connections(), 0, 'the redirect target never got a connection')
  t.equal(target.attempts.length, 0)
})

t.test('connection refused: every attempt made, failed with "connection refused"', async t => {
  const port = await closedPort()
  const r = await row(t, [200], {}, () => `http://127.0.0.1:${port}/hook?src=sidecar`)
  checkFailure(t, r, 3, 'connection refused')
  t.same(r.counts, { attempts: { network: 3 }, deliveries: { failed: 1 } })
  t.same(r.pauses.map(ms => ms >= Math.min(20, MAX_DELAY / 2)), [true, true], `the attempts were spaced (pauses set to ${r.pauses.join(' and ')} ms)`)
  t.ok(r.pauses.every(ms => ms <= MAX_DELAY), 'and quick: no pause longer than WEBHOOK_MAX_DELAY_MS')
  t.equal(r.receiver.connections(), 0)
})

t.test('a receiver that hangs past WEBHOOK_TIMEOUT_MS: "timeout", retried', async t => {
  const r = await row(t, ['hang'], { WEBHOOK_TIMEOUT_MS: '200' })
  t.equal(r.attempts.length, 3)
  for (const [i, attempt] of r.attempts.entries()) {
    // the timer the attempt set, and the outcome "timeout" (below), prove the cut: the time the receiver
    // held it runs from the request's arrival, which a loaded machine delays by any amount (94 ms held once)
    const held = (attempt.endedAt as number) - attempt.arrivedAt
    t.equal(r.timeouts[i], 200, `attempt ${i + 1} was given up at its 200 ms time-out (held ${held.toFixed(0)} ms)`)
  }
  checkPauses(t, r)
  checkFailure(t, r, 3, 'timeout')
  t.same(r.counts, { attempts: { timeout: 3 }, deliveries: { failed: 1 } })
})

t.test('a receiver that answers slowly but within WEBHOOK_TIMEOUT_MS is not cut', async t => {
  const r = await row(t, [{ status: 200, delayMs: 150 }], { WEBHOOK_TIMEOUT_MS: '1000' })
  t.equal(r.attempts.length, 1)
  t.same(r.counts, { attempts: { '2xx': 1 }, deliveries: { delivered: 1 } })
})

t.test('a receiver that resets the connection: retried, "connection reset"', async t => {
  const r = await row(t, ['reset'])
  t.equal(r.attempts.length, 3)
  checkPauses(t, r)
  checkFailure(t, r, 3, 'connection reset')
  t.same(r.counts, { attempts: { network: 3 }, deliveries: { failed: 1 } })
  t.equal(r.receiver.connections(), 3, 'a fresh connection for each attempt')

  const recovered = await row(t, ['reset', 200])
  t.equal(recovered.attempts.length, 2)
  t.same(recovered.counts, { attempts: { network: 1, '2xx': 1 }, deliveries: { delivered: 1 } })
})

t.test('every kind of outcome in one delivery, counted by outcome', async t => {
  const r = await row(t, [404, 'reset', { status: 302, headers: { location: 'http://127.0.0.1:1/' } }, 'hang', 200],
    { WEBHOOK_ATTEMPTS: '5', WEBHOOK_TIMEOUT_MS: '200' })
  t.equal(r.attempts.length, 5)
  checkPauses(t, r)
  t.same(r.counts, { attempts: { 404: 1, network: 1, other: 1, timeout: 1, '2xx': 1 }, deliveries: { delivered: 1 } })
  t.equal(r.failures.length, 0)

  const stopped = await row(t, [404, 'reset', 500, 200])
  t.equal(stopped.attempts.length, 3, 'a 5xx after retries still stops')
  checkFailure(t, stopped, 3, 'status 500')
  t.same(stopped.counts, { attempts: { 404: 1, network: 1, '5xx': 1 }, deliveries: { failed: 1 } })
})

t.test('WEBHOOK_ATTEMPTS=1: one attempt, even for a retryable outcome', async t => {
  const r = await row(t, [404, 200], { WEBHOOK_ATTEMPTS: '1' })
  t.equal(r.attempts.length, 1)
  checkFailure(t, r, 1, 'status 404')
  t.same(r.counts, { attempts: { 404: 1 }, deliveries: { failed: 1 } })

  const port = await closedPort()
  const refused = await row(t, [200], { WEBHOOK_ATTEMPTS: '1' }, () => `http://127.0.0.1:${port}/hook?src=sidecar`)
  checkFailure(t, refused, 1, 'connection refused')
  t.same(refused.counts, { attempts: { network: 1 }, deliveries: { failed: 1 } })
})

t.test('WEBHOOK_ATTEMPTS=5: five attempts in total', async t => {
  const failed = await row(t, [404], { WEBHOOK_ATTEMPTS: '5' })
  t.equal(failed.attempts.length, 5)
  checkPauses(t, failed)
  checkFailure(t, failed, 5, 'status 404')
  t.same(failed.counts, { attempts: { 404: 5 }, deliveries: { failed: 1 } })

  const last = await row(t, [404, 404, 404, 404, 200], { WEBHOOK_ATTEMPTS: '5' })
  t.equal(last.attempts.length, 5, 'delivered at the last attempt')
  t.same(last.counts, { attempts: { 404: 4, '2xx': 1 }, deliveries: { delivered: 1 } })
  t.equal(last.failures.length, 0)
})

t.test('pauses never exceed WEBHOOK_MAX_DELAY_MS, however the backoff grows', async t => {
  const r = await row(t, [404], { WEBHOOK_ATTEMPTS: '4', WEBHOOK_MAX_DELAY_MS: '300' })
  t.equal(r.attempts.length, 4)
  checkPauses(t, r, 300)
  checkFailure(t, r, 4, 'status 404')
})

t.test('WEBHOOK_MAX_DELAY_MS=0: retries follow at once', async t => {
  const r = await row(t, [404], { WEBHOOK_MAX_DELAY_MS: '0' })
  t.equal(r.attempts.length, 3)
  checkPauses(t, r, 0)
  checkFailure(t, r, 3, 'status 404')
})

t.test('attempts leave nothing on the long-lived shutdown signal (AbortSignal.any would: nodejs/node#55351); one listener on it serves them all', async t => {
  const receiver = await startWebhookReceiver([404, 200])
  t.teardown(() => receiver.close())
  const delivery = loopbackDelivery(t, 3, 2000)
  const shutdown = new AbortController()
  // on Node 20 every AbortSignal.any([shutdown, …]) keeps an entry on `shutdown` for good (Node
  // 24 frees it): the calls are watched directly, so the check holds on every version
  const anyCalls: AbortSignal[][] = []
  const any = AbortSignal.any.bind(AbortSignal)
  AbortSignal.any = (signals: AbortSignal[]): AbortSignal => { anyCalls.push([...signals]); return any(signals) }
  t.teardown(() => { AbortSignal.any = any })
  const results: string[] = []
  for (let i = 0; i < 20; i++) {
    results.push(await delivery.deliver({ target: { url: new URL(`${receiver.url}/hook`), secret: undefined }, runId: `sig-${i}`, body: '{}' }, shutdown.signal))
  }
  t.same(results, Array(20).fill('delivered'), 'the first job took a 404 and a retry, the others went through at once')
  t.equal(receiver.attempts.length, 21)
  t.equal(getEventListeners(shutdown.signal, 'abort').length, 1, 'one listener, not one per attempt')
  const together = await Promise.all(Array.from({ length: 50 }, async (_, i) =>
    await delivery.deliver({ target: { url: new URL(`${receiver.url}/hook`), secret: undefined }, runId: `together-${i}`, body: '{}' }, shutdown.signal)))
  t.same(together, Array(50).fill('delivered'))
  t.equal(getEventListeners(shutdown.signal, 'abort').length, 1, 'still one after 50 attempts at once')
  t.same(anyCalls.filter(signals => signals.includes(shutdown.signal)), [], 'AbortSignal.any never ties an attempt to the shutdown signal')
})

t.test(`past ${CONNECTIONS_PER_DESTINATION} attempts in flight to one receiver, the next waits without a connection and leaves at once when aborted`, async t => {
  const receiver = await startWebhookReceiver(['hang'])
  t.teardown(() => receiver.close())
  const delivery = loopbackDelivery(t, 1, 10_000)
  const job = (runId: string): WebhookJob => ({ target: { url: new URL(`${receiver.url}/hook`), secret: undefined }, runId, body: '{}' })
  const held = new AbortController()
  const inFlight = Array.from({ length: CONNECTIONS_PER_DESTINATION }, async (_, i) => await delivery.deliver(job(`held-${i}`), held.signal))
  await receiver.waitForAttempts(CONNECTIONS_PER_DESTINATION)

  const waiting = new AbortController()
  const extra = delivery.deliver(job('extra'), waiting.signal)
  await wait(100) // time for a connection it should not open
  t.equal(receiver.connections(), CONNECTIONS_PER_DESTINATION, 'the next attempt opened no connection')
  waiting.abort()
  t.equal(await extra, 'shutdown')
  t.equal(receiver.attempts.filter(attempt => attempt.endedAt !== undefined).length, 0, 'it left at once, while every connection was still busy')
  t.equal(receiver.attempts.length, CONNECTIONS_PER_DESTINATION, 'and never reached the receiver')

  held.abort()
  t.same(await Promise.all(inFlight), Array(CONNECTIONS_PER_DESTINATION).fill('shutdown'))
})

t.test('a durable delivery: each attempt told to its ledger first; a taken-over one makes only the attempts left; done at its end, left (not done) on shutdown', async t => {
  const receiver = await startWebhookReceiver([404, 404, 404, 404, 'hang'])
  t.teardown(() => receiver.close())
  const delivery = loopbackDelivery(t, 3, 10_000)
  const ledger = (attemptsMade: number, steps: string[]): WebhookJob['ledger'] => ({
    attemptsMade,
    attempt: async () => { steps.push(`attempt (${receiver.attempts.length} received)`) },
    done: async () => { steps.push('done') },
    leave: async () => { steps.push('leave') }
  })
  const ends: Array<[string, number]> = []
  const job = (runId: string, steps: string[], attemptsMade: number): WebhookJob => ({
    target: { url: new URL(`${receiver.url}/hook`), secret: undefined }, runId, body: '{}', ledger: ledger(attemptsMade, steps), onEnd: (result, attempts) => { ends.push([result, attempts]) }
  })

  const takenOver: string[] = []
  t.equal(await delivery.deliver(job('taken-over', takenOver, 2), new AbortController().signal), 'failed')
  t.same(takenOver, ['attempt (0 received)', 'done'], 'two of three were made elsewhere: one attempt here, counted before it went out')
  t.same(ends, [['failed', 3]], 'three attempts in all')

  const fresh: string[] = []
  t.equal(await delivery.deliver(job('fresh', fresh, 0), new AbortController().signal), 'failed')
  t.same(fresh, ['attempt (1 received)', 'attempt (2 received)', 'attempt (3 received)', 'done'], 'a fresh one makes all three')
  t.equal(receiver.attempts.length, 4)

  const stopping = new AbortController()
  const stopped: string[] = []
  const cut = delivery.deliver(job('cut', stopped, 0), stopping.signal)
  await receiver.waitForAttempts(5) // hangs
  stopping.abort()
  t.equal(await cut, 'shutdown')
  t.same(stopped, ['attempt (4 received)', 'leave'], 'left for another sidecar, not done')
  t.same(ends, [['failed', 3], ['failed', 3]], 'a left delivery has not ended: no onEnd')
})
