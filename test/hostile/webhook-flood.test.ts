import { createServer, type Socket } from 'node:net'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { CONNECTIONS_PER_DESTINATION } from '../../src/webhook/destination-pools.ts'
import { eventually, type LogLine, sidecarFor, type TestServer } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'
import { startWebhookReceiver } from '../helpers/webhook-receiver.ts'
import { call, deliveriesFinished, linesWith, LOOPBACK_ENV, startWebhookApp, webhookCounts } from '../webhook/webhook-kit.ts'

// A flood of calls whose webhookEndpoint is a receiver that accepts connections and never
// answers. Each pending delivery used to hold a socket of its own, and timed-out attempts left
// fresh idle connections behind (15k sockets, +450 MB in the security review). Now: at most
// CONNECTIONS_PER_DESTINATION connections to it at once, past WEBHOOK_MAX_PENDING a webhook is
// dropped, and the connection of every timed-out attempt is closed.

/** Slack for timers and scheduling on a busy machine; far below undici's 10 s idle keep-alive. */
const SLACK_MS = 1000

/** A TCP receiver that reads what arrives and never answers, counting its connections exactly (events, not polling). */
interface SilentReceiver {
  readonly url: string
  /** Connections accepted so far. */
  readonly accepted: () => number
  /** Connections whose peer has not closed them yet. */
  readonly open: () => number
  /** The most connections open at one moment. */
  readonly peakOpen: () => number
  /** How long each connection stayed open until its peer closed it, ms. */
  readonly lifetimes: number[]
  close: () => Promise<void>
}

async function startSilentReceiver (): Promise<SilentReceiver> {
  const sockets = new Set<Socket>()
  const lifetimes: number[] = []
  let accepted = 0
  let peak = 0
  const server = createServer(socket => {
    const openedAt = performance.now()
    accepted++
    sockets.add(socket)
    peak = Math.max(peak, sockets.size)
    // the peer is gone at its FIN or RST: 'close' comes only after our side's own close, which a
    // new connection's accept can overtake
    const gone = (): void => {
      if (!sockets.delete(socket)) return
      lifetimes.push(performance.now() - openedAt)
    }
    socket.on('end', gone)
    socket.on('error', gone)
    socket.on('close', gone)
    socket.resume()
  })
  await new Promise<void>(resolve => server.listen({ port: 0, host: '127.0.0.1', backlog: 1024 }, resolve))
  const { port } = server.address() as { port: number }
  return {
    url: `http://127.0.0.1:${port}/hook`,
    accepted: () => accepted,
    open: () => sockets.size,
    peakOpen: () => peak,
    lifetimes,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise(resolve => server.close(resolve))
    }
  }
}

/** `count` calls with a webhook to `endpoint`, 20 at a time; resolves with their statuses. */
async function flood (h: Parameters<typeof call>[0], endpoint: string, count: number, prefix: string): Promise<number[]> {
  const statuses: number[] = []
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < count) {
      const id = `${prefix}-${next++}`
      statuses.push((await call(h, '/json', endpoint, { headers: { 'x-request-id': id } })).status)
    }
  }
  await Promise.all(Array.from({ length: 20 }, worker))
  return statuses
}

/** True once `check` holds, false when it did not within `ms` (so that each property is reported on its own). */
async function holdsWithin (check: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  return await eventually(check, ms).then(() => true, () => false)
}

let app: TestServer
t.before(async () => { app = await startWebhookApp() })
t.teardown(() => app.close())

t.test('a flood: past WEBHOOK_MAX_PENDING webhooks are dropped, and one receiver never has more than CONNECTIONS_PER_DESTINATION connections', async t => {
  const receiver = await startSilentReceiver()
  t.teardown(() => receiver.close())
  const maxPending = 100
  const calls = 300
  // no attempt ends during this test: the deliveries stay pending until the sidecar closes
  const h = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_MAX_PENDING: String(maxPending), WEBHOOK_TIMEOUT_MS: '60000' })

  const statuses = await flood(h, receiver.url, calls, 'flood')
  t.same(statuses, Array(calls).fill(200), 'every caller is answered at once, whatever happens to its webhook')
  await holdsWithin(async () => (await webhookCounts(h)).deliveries.dropped === calls - maxPending, 5000)
  t.same(await webhookCounts(h), { attempts: {}, deliveries: { dropped: calls - maxPending } }, `the ${calls - maxPending} past the bound counted as dropped`)
  t.equal(linesWith(h.logs, 'webhook dropped').length, calls - maxPending, 'each drop logged')
  t.equal(h.sidecar.webhooks.pending, maxPending, `${maxPending} deliveries pending (WEBHOOK_MAX_PENDING)`)
  t.ok(await holdsWithin(() => receiver.open() === CONNECTIONS_PER_DESTINATION, 5000), `${CONNECTIONS_PER_DESTINATION} connections open to the receiver (${receiver.open()})`)
  await sleep(200) // room for any further connection to arrive
  t.equal(receiver.peakOpen(), CONNECTIONS_PER_DESTINATION, `never more than ${CONNECTIONS_PER_DESTINATION} open at once`)
  t.equal(receiver.accepted(), CONNECTIONS_PER_DESTINATION, `the other ${maxPending - CONNECTIONS_PER_DESTINATION} pending deliveries wait without a connection`)
})

t.test('attempts that time out, sent or waiting for a connection, count as timeouts and leave no connection open', async t => {
  const receiver = await startSilentReceiver()
  t.teardown(() => receiver.close())
  const deliveries = 2 * CONNECTIONS_PER_DESTINATION
  const timeoutMs = 1000
  const h = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_TIMEOUT_MS: String(timeoutMs), WEBHOOK_ATTEMPTS: '2' })

  t.same(await flood(h, receiver.url, deliveries, 'timeout'), Array(deliveries).fill(200))
  await eventually(async () => await deliveriesFinished(h) === deliveries, 2 * (timeoutMs + 100) + 10_000)
  t.same(await webhookCounts(h), { attempts: { timeout: 2 * deliveries }, deliveries: { failed: deliveries } }, 'every attempt counted as a timeout')
  const failures = linesWith(h.logs, 'webhook failed')
  t.equal(failures.length, deliveries)
  t.same(new Set(failures.map((line: LogLine) => `${String(line.attempts)} ${String(line.outcome)}`)), new Set(['2 timeout']), 'each logged as failed after 2 attempts, outcome "timeout"')
  t.ok(receiver.peakOpen() <= CONNECTIONS_PER_DESTINATION, `never more than ${CONNECTIONS_PER_DESTINATION} connections open at once (${receiver.peakOpen()})`)

  // undici keeps an idle connection 10 s, and reconnected after each aborted request
  t.ok(await holdsWithin(() => receiver.open() === 0, SLACK_MS), `no connection left open once the attempts timed out (${receiver.open()} open)`)
  t.equal(receiver.lifetimes.length, receiver.accepted(), `the sidecar closed every connection (${receiver.accepted()} in all)`)
  const longest = Math.max(...receiver.lifetimes)
  t.ok(longest <= timeoutMs + SLACK_MS, `none outlived an attempt's time limit (longest ${longest.toFixed(0)} ms)`)
})

t.test('the bound is per destination: a flooded receiver does not hold up a webhook to another', async t => {
  const silent = await startSilentReceiver()
  t.teardown(() => silent.close())
  const healthy = await startWebhookReceiver([200])
  t.teardown(() => healthy.close())
  const flooded = 2 * CONNECTIONS_PER_DESTINATION
  const h = await sidecarFor(t, app.url, { ...LOOPBACK_ENV, WEBHOOK_TIMEOUT_MS: '3000', WEBHOOK_ATTEMPTS: '1' })
  await flood(h, silent.url, flooded, 'stuck')
  await eventually(() => silent.peakOpen() === CONNECTIONS_PER_DESTINATION, 3000)
  t.equal((await call(h, '/json', `${healthy.url}/hook`, { headers: { 'x-request-id': 'healthy' } })).status, 200)
  await healthy.waitForAttempts(1, 3000)
  t.ok(h.sidecar.webhooks.pending >= flooded, `delivered while all ${flooded} deliveries to the flooded receiver were pending (${h.sidecar.webhooks.pending})`)
  await eventually(async () => await deliveriesFinished(h) === flooded + 1, 15_000)
  t.equal(silent.peakOpen(), CONNECTIONS_PER_DESTINATION)
  t.same(await webhookCounts(h), { attempts: { timeout: flooded, '2xx': 1 }, deliveries: { failed: flooded, delivered: 1 } })
})
