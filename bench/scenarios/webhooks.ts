import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { scrapeMetrics, sumOf } from '../../test/helpers/admin-metrics.ts'
import { atMost, cpuPerRequest, pairedRatio, pairRatios, roundsOf, rps } from '../checks.ts'
import { type LoadOptions, type LoadRequest, type Measurement, runLoad } from '../load.ts'
import type { BenchContext, Check, Evaluation, PreparedScenario, Scenario, TargetResult } from '../scenario.ts'
import type { BenchSettings } from '../settings.ts'
import {
  appRunRequest, expectGreeting, expectRawGreeting, proxyTarget, runRequest, shareServers, sidecarTarget, startBenchServer, type StartedServer, startExampleApp
} from '../targets.ts'

/**
 * Issues 4 and 17: the sidecar with `webhookEndpoint` on every call vs without, and the Node floor.
 * Targets: CPU per delivery ≤ 1.0× CPU per proxied call; every webhook delivered exactly once
 * (counted at the receiver by each call's unique X-Request-Id).
 */
const DELIVERY_CPU_TARGET = 1.0
/** The longest wait for the sidecar's pending deliveries after a phase. */
const DRAIN_TIMEOUT_MS = 120_000
/** Deliveries finished without progress this long: the rest are not coming. */
const STALL_MS = 3000

/** Max throughput, every call with its own X-Request-Id (`ids`; the same load on every target). */
export async function loadWithIds (request: LoadRequest, settings: BenchSettings, ids: LoadOptions['requestIds']): Promise<Measurement> {
  return await runLoad(request, { connections: settings.connections, durationSeconds: settings.durationSeconds, requestIds: ids })
}

/** A fresh X-Request-Id prefix. */
export const prefix = (): string => `wh${randomBytes(4).toString('hex')}-`

/** The webhook counts of a phase's table (webhooks and recorded). */
export const WEBHOOK_COLUMNS = [{ key: 'received', label: 'webhooks received', combine: 'sum' as const },
  { key: 'duplicates', label: 'dupl.', combine: 'sum' as const }, { key: 'missing', label: 'missing', combine: 'sum' as const }]

/** The sidecar's deliveries by result, and its calls, from its /metrics. */
async function deliveries (adminOrigin: string): Promise<{ finished: number, delivered: number, failed: number, dropped: number, calls: number }> {
  const samples = await scrapeMetrics(adminOrigin)
  const [delivered, failed, dropped] = ['delivered', 'failed', 'dropped'].map(result => sumOf(samples, 'sidecar_webhook_deliveries_total', { result })) as [number, number, number]
  return { finished: delivered + failed + dropped, delivered, failed, dropped, calls: sumOf(samples, 'sidecar_requests_total', { route: 'invoke' }) }
}

/** Waits until the sidecar finished a delivery for every call so far, or nothing moved for STALL_MS; returns the seconds waited. */
export async function drain (adminOrigin: string): Promise<number> {
  const startedAt = performance.now()
  let last = -1
  let lastMoved = startedAt
  for (;;) {
    const now = await deliveries(adminOrigin)
    if (now.finished >= now.calls) break
    if (now.finished !== last) { last = now.finished; lastMoved = performance.now() }
    if (performance.now() - lastMoved > STALL_MS || performance.now() - startedAt > DRAIN_TIMEOUT_MS) break
    await sleep(50)
  }
  return (performance.now() - startedAt) / 1000
}

/**
 * The webhook target's phase: the warm-up's deliveries drained, the receiver reset, the load
 * (ids recorded), the deliveries drained, then every id accounted for (the figures in `extra`).
 */
export async function webhookPhase (request: LoadRequest, settings: BenchSettings, adminOrigin: string, receiver: StartedServer): Promise<Measurement> {
  await drain(adminOrigin)
  await fetch(`${receiver.origin}/reset`, { method: 'POST' })
  const before = await deliveries(adminOrigin)
  const idPrefix = prefix()
  let issued = 0
  const answered = new Set<string>()
  const measured = await loadWithIds(request, settings, { prefix: idPrefix, onIssued: () => { issued++ }, onAnswered: id => { answered.add(id) } })
  const drainSeconds = await drain(adminOrigin)
  const after = await deliveries(adminOrigin)
  const stats = await (await fetch(`${receiver.origin}/stats`)).json() as { deliveries: number, unique: number, malformed: number, connections: number }
  const counts = new Map<string, number>() // the receiver's `<id> <deliveries>` lines
  for (const line of (await (await fetch(`${receiver.origin}/ids`)).text()).split('\n')) {
    const space = line.lastIndexOf(' ')
    if (space > 0) counts.set(line.slice(0, space), Number(line.slice(space + 1)))
  }
  let [duplicates, foreign, inFlightDelivered, missing] = [0, 0, 0, 0]
  for (const [id, n] of counts) {
    if (n > 1) duplicates += n - 1
    const index = id.startsWith(idPrefix) ? Number(id.slice(idPrefix.length)) : NaN
    if (!Number.isInteger(index) || index < 0 || index >= issued) foreign++
    else if (!answered.has(id)) inFlightDelivered++
  }
  for (const id of answered) if (!counts.has(id)) missing++
  return {
    ...measured,
    extra: {
      answered: answered.size, received: stats.deliveries, duplicates, missing, foreign, malformed: stats.malformed, receiverConnections: stats.connections,
      inFlightDelivered, sidecarDelivered: after.delivered - before.delivered, failed: after.failed - before.failed, dropped: after.dropped - before.dropped, drainSeconds
    }
  }
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app, receiver }, jwks, token, prepared } = await shareServers(ctx, { app: startExampleApp, receiver: c => startBenchServer(c, 'webhook-receiver') })
  const hook = `?webhookEndpoint=${encodeURIComponent(`${receiver.origin}/hook`)}`
  const sidecar = (withWebhooks: boolean) => sidecarTarget(ctx, {
    id: withWebhooks ? 'sidecar-webhooks' : 'sidecar',
    label: withWebhooks ? 'sidecar, webhookEndpoint on every call' : 'sidecar, no webhooks',
    appOrigin: app.origin,
    jwksUrl: jwks.url,
    env: { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' },
    request: origin => runRequest(origin, token, withWebhooks ? hook : ''),
    checkResponse: expectGreeting,
    ...(withWebhooks ? { notes: ['CPU µs/req includes delivering the webhooks (the wait for the pending deliveries after the load is inside the phase\'s CPU accounting); the app column adds the receiver'] } : {}),
    running: (started, request) => ({
      runPhase: async (_phase, settings) => withWebhooks ? await webhookPhase(request, settings, started.adminOrigin, receiver) : await loadWithIds(request, settings, { prefix: prefix() })
    })
  })
  return prepared([proxyTarget(ctx, 'floor', 'the Node floor (no webhooks)', app, appRunRequest, expectRawGreeting), sidecar(false), sidecar(true)])
}

/** CPU per delivery / CPU per proxied call in a round: (CPU with webhooks − calls × CPU per call without) / deliveries, over CPU per call. */
function deliveryCpu (withHooks: Measurement, without: Measurement): number {
  const perCall = without.cpu?.targetUsPerRequest ?? NaN
  const total = (withHooks.cpu?.targetUsPerRequest ?? NaN) * withHooks.ok
  return (total - perCall * withHooks.ok) / (withHooks.extra?.sidecarDelivered ?? NaN) / perCall
}

function evaluate (results: TargetResult[]): Evaluation {
  const withHooks = roundsOf(results, 'sidecar-webhooks', 'throughput')
  const delivery = pairedRatio('cpu/delivery/call', 'sidecar CPU per webhook delivery / its CPU per proxied call', '×', withHooks, roundsOf(results, 'sidecar', 'throughput'), deliveryCpu)
  const ratios = [
    delivery,
    ...pairRatios(results, 'throughput', '×', rps, [['webhooks/none', 'sidecar with webhooks / without, requests/s', 'sidecar-webhooks', 'sidecar'],
      ['sidecar/floor', 'sidecar without webhooks / the Node floor, requests/s', 'sidecar', 'floor']]),
    ...pairRatios(results, 'throughput', '×', cpuPerRequest, [['cpu/sidecar/floor', 'sidecar without webhooks / the Node floor, CPU per request', 'sidecar', 'floor']])
  ]
  const checks: Check[] = [atMost(`sidecar CPU per delivery ≤ ${DELIVERY_CPU_TARGET}× its CPU per proxied call`, delivery, DELIVERY_CPU_TARGET)]

  const label = 'every webhook delivered exactly once (counted at the receiver by X-Request-Id)'
  const measured = withHooks.filter((m): m is Measurement => m?.extra !== undefined)
  if (measured.length === 0) checks.push({ label, status: 'INVALID', detail: 'no round of the webhook target was measured' })
  else {
    const total = (key: string): number => measured.reduce((sum, m) => sum + (m.extra?.[key] ?? 0), 0)
    const problems = ['duplicates', 'missing', 'foreign', 'malformed', 'failed', 'dropped'].filter(key => total(key) > 0)
    const mismatch = measured.filter(m => m.extra?.received !== m.extra?.sidecarDelivered).length
    const detail = `${total('answered').toLocaleString('en-US')} calls answered 2xx, ${total('received').toLocaleString('en-US')} deliveries received ` +
      `(${total('inFlightDelivered')} of them for calls still in flight when the load stopped); duplicates ${total('duplicates')}, missing ${total('missing')}, ` +
      `unknown ids ${total('foreign')}, malformed ${total('malformed')}; sidecar: failed ${total('failed')}, dropped ${total('dropped')}` +
      `${mismatch > 0 ? `; receiver count ≠ sidecar's delivered count in ${mismatch} round(s)` : ''}; ` +
      `longest wait for pending deliveries after the load ${Math.max(...measured.map(m => m.extra?.drainSeconds ?? 0)).toFixed(1)} s`
    checks.push({ label, status: problems.length === 0 && mismatch === 0 ? 'PASS' : 'FAIL', detail })
  }
  return { ratios, checks }
}

export const webhooksScenario: Scenario = {
  name: 'webhooks',
  baselineId: 'sidecar',
  description: 'the JSON POST of json-post through the Node floor and through the sidecar (auth on, a cached token, LOG_LEVEL=info), with and without a webhookEndpoint on every call; deliveries to a receiver on loopback',
  phases: [{
    id: 'throughput',
    label: 'max throughput',
    run: async (request, settings) => await loadWithIds(request, settings, { prefix: prefix() }),
    columns: [...WEBHOOK_COLUMNS, { key: 'receiverConnections', label: 'connections to the receiver' }, { key: 'drainSeconds', label: 'drain s', combine: 'max', digits: 1 }]
  }],
  method: settings =>
    `Max throughput: autocannon, ${settings.connections} connections, every call its own X-Request-Id (on both targets). ` +
    'After the load, the bench waits until the sidecar has finished a delivery for every call (its /metrics), then matches the ids the ' +
    'receiver counted against the calls answered (webhook counts summed over the rounds; drain s: the longest of those waits). ' +
    'WEBHOOK_ALLOWED_CIDRS=127.0.0.0/8 on both. Latencies in ms, 2xx only.',
  beforeIds: ['sidecar', 'sidecar-webhooks'],
  prepare,
  evaluate
}
