import { setTimeout as sleep } from 'node:timers/promises'
import { scrapeMetrics, sumOf } from '../../test/helpers/admin-metrics.ts'
import { atMost, builds, type Compare, ownFigure, pairRatios, roundsOf, rps, thresholdCheck } from '../checks.ts'
import { runLoad } from '../load.ts'
import type { BenchContext, Evaluation, PreparedScenario, Ratio, Scenario, TargetResult } from '../scenario.ts'
import { expectGreeting, runRequest, shareServers, sidecarTarget, startBenchServer, startExampleApp } from '../targets.ts'
import { type BenchRedis, benchRedis } from './bench-redis.ts'
import { drain, loadWithIds, prefix, WEBHOOK_COLUMNS, webhookPhase } from './webhooks.ts'

/**
 * Issues 15 and 30: what a recorded call costs. A sync call with its own Idempotency-Key (claimed,
 * recorded, its answer kept) against a plain call, both with RUN_STORE_URL=redis; a call whose
 * webhook is delivered durably (written to Redis first) against the plain call, for the CPU one
 * delivery costs; and the Redis memory a finished call leaves. Targets: idempotent ≥ 0.7× plain
 * calls/s; CPU per delivery ≤ CPU per call; ≤ 1,000 bytes kept per idempotent call.
 */
const IDEMPOTENT_TARGET = 0.7
const DELIVERY_CPU_TARGET = 1
const BYTES_TARGET = 1000

/**
 * The Redis's used_memory once the sidecar has no call in flight and the figure stopped moving
 * (two reads 200 ms apart within 1 KiB; at most 10 s): what the calls so far left behind.
 */
async function settledMemory (redis: BenchRedis, adminOrigin: string): Promise<number> {
  const deadline = performance.now() + 10_000
  while (performance.now() < deadline && sumOf(await scrapeMetrics(adminOrigin), 'sidecar_inflight_requests') > 0) await sleep(20)
  let last = await redis.usedMemory()
  while (performance.now() < deadline) {
    await sleep(200)
    const now = await redis.usedMemory()
    if (Math.abs(now - last) < 1024) return now
    last = now
  }
  return last
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app, receiver }, jwks, token, prepared } = await shareServers(ctx, { app: startExampleApp, receiver: c => startBenchServer(c, 'webhook-receiver') })
  const redis = await benchRedis(ctx)
  const store = 'skip' in redis ? undefined : redis
  const hook = `?webhookEndpoint=${encodeURIComponent(`${receiver.origin}/hook`)}`
  const target = (id: string, label: string, withRedis: boolean, kind: 'plain' | 'idempotent' | 'webhook') => sidecarTarget(ctx, {
    id,
    label,
    ...(withRedis && 'skip' in redis ? { skipReason: redis.skip } : {}),
    ...(withRedis ? { beforeStart: async () => { await store?.flush() } } : {}),
    logLevel: 'warn',
    appOrigin: app.origin,
    jwksUrl: jwks.url,
    // no webhook is dropped for the bounds (WEBHOOK_MAX_PENDING): every one is delivered, so its whole cost is measured
    env: { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_MAX_PENDING: '100000', ...(withRedis && store !== undefined ? { RUN_STORE_URL: store.url } : {}) },
    request: origin => runRequest(origin, token, kind === 'webhook' ? hook : ''),
    checkResponse: expectGreeting,
    running: (sidecar, request) => {
      // every call its own id (and, for the idempotent target, its own key: each one a first request)
      const load = kind === 'webhook'
        ? async (settings: BenchContext['settings']) => await webhookPhase(request, settings, sidecar.adminOrigin, receiver)
        : async (settings: BenchContext['settings']) => await loadWithIds(request, settings, { prefix: prefix(), ...(kind === 'idempotent' ? { header: 'idempotency-key' } : {}) })
      return {
        runPhase: async (_phase, settings) => {
          if (!withRedis || store === undefined) return await load(settings)
          // with Redis, also the bytes each call left there (the warm-up's deliveries finished first)
          if (kind === 'webhook') await drain(sidecar.adminOrigin)
          const before = await settledMemory(store, sidecar.adminOrigin)
          const measured = await load(settings)
          const after = await settledMemory(store, sidecar.adminOrigin)
          return { ...measured, extra: { ...measured.extra, redisBytesPerCall: (after - before) / Math.max(1, measured.ok) } }
        }
      }
    }
  })
  const scenario = prepared([
    target('plain-redis', 'plain calls, RUN_STORE_URL=redis', true, 'plain'),
    target('idempotent-redis', 'every call its own Idempotency-Key, Redis', true, 'idempotent'),
    target('webhooks-redis', 'webhookEndpoint on every call, durable delivery (Redis)', true, 'webhook'),
    target('plain', 'plain calls, no RUN_STORE_URL', false, 'plain'),
    target('idempotent-memory', 'every call its own Idempotency-Key, memory', false, 'idempotent'),
    target('webhooks-memory', 'webhookEndpoint on every call, in memory', false, 'webhook')
  ])
  return store === undefined ? scenario : store.prepared(scenario)
}

/** CPU per delivery / CPU per plain call: the webhook target's CPU per call less the plain one's, over the plain one's. */
const deliveryCpu: Compare = (x, y) => ((x.cpu?.targetUsPerRequest ?? NaN) - (y.cpu?.targetUsPerRequest ?? NaN)) / (y.cpu?.targetUsPerRequest ?? NaN)

function evaluate (results: TargetResult[]): Evaluation {
  // this build, and (BENCH_BEFORE_BIN) the older one
  const redisFigures = builds(results, 'idempotent-redis').map(({ suffix: s, label }) => [
    ...pairRatios(results, 'throughput', '×', rps, [[`idempotent/plain${s}`, `calls/s with their own Idempotency-Key / plain calls, both with Redis${label}`, `idempotent-redis${s}`, `plain-redis${s}`]]),
    ...pairRatios(results, 'throughput', '×', deliveryCpu, [[`delivery/call${s}`,
      `sidecar CPU per durable delivery (CPU per call with a webhook − per plain call) / CPU per plain call${label}`, `webhooks-redis${s}`, `plain-redis${s}`]]),
    ownFigure(`bytes/idempotent${s}`, `Redis bytes kept per finished idempotent call (used_memory after − before the phase ÷ calls)${label}`, 'B',
      roundsOf(results, `idempotent-redis${s}`, 'throughput'), x => x.extra?.redisBytesPerCall ?? NaN),
    ownFigure(`bytes/webhook${s}`, `Redis bytes kept per call with a delivered webhook${label}`, 'B',
      roundsOf(results, `webhooks-redis${s}`, 'throughput'), x => x.extra?.redisBytesPerCall ?? NaN)
  ])
  const [idempotent, delivery, bytes] = redisFigures[0] as [Ratio, Ratio, Ratio, Ratio]
  const [memory, memoryDelivery] = [
    ...pairRatios(results, 'throughput', '×', rps, [['idempotent-memory/plain', 'calls/s with their own Idempotency-Key in memory / plain calls without RUN_STORE_URL', 'idempotent-memory', 'plain']]),
    ...pairRatios(results, 'throughput', '×', deliveryCpu, [['memory-delivery/call', 'the same in memory (no RUN_STORE_URL): CPU per delivery / CPU per plain call', 'webhooks-memory', 'plain']])
  ] as [Ratio, Ratio]
  return {
    ratios: [...redisFigures.flat(), memory, memoryDelivery],
    checks: [
      thresholdCheck(`an idempotent sync call ≥ ${IDEMPOTENT_TARGET}× the throughput of a plain one (Redis)`, idempotent, IDEMPOTENT_TARGET, true),
      atMost('a webhook delivery costs the sidecar no more CPU than the call it reports on', delivery, DELIVERY_CPU_TARGET),
      atMost(`≤ ${BYTES_TARGET.toLocaleString('en-US')} Redis bytes kept per finished idempotent call`, bytes, BYTES_TARGET)
    ]
  }
}

export const recordedScenario: Scenario = {
  name: 'recorded',
  baselineId: 'plain-redis',
  description: 'the cost of a recorded call: every call its own Idempotency-Key (Redis and memory) and a durably delivered webhook on every call, against plain calls with RUN_STORE_URL=redis; the Redis memory a call leaves',
  beforeIds: ['plain-redis', 'idempotent-redis', 'webhooks-redis'],
  phases: [{
    id: 'throughput',
    label: 'max throughput',
    run: async (request, settings) => await runLoad(request, { connections: settings.connections, durationSeconds: settings.durationSeconds }),
    columns: [...WEBHOOK_COLUMNS, { key: 'redisBytesPerCall', label: 'Redis B kept/call' }]
  }],
  method: settings =>
    `Max throughput: autocannon, ${settings.connections} connections, ${settings.durationSeconds} s, auth on (a cached token), json-post's POST /run; ` +
    'every call its own X-Request-Id, and on the idempotent targets its own Idempotency-Key (each a first request: claimed, recorded as a run, its answer kept). ' +
    'The webhook target waits after the load until every delivery has finished and matches them at the receiver (as the webhooks scenario does): ' +
    'its CPU per call minus the plain target\'s is the CPU one durable delivery costs. ' +
    'Redis B kept/call: the server\'s used_memory after the phase (no call in flight, the figure still for 200 ms) − before it, ÷ the calls answered. ' +
    'Redis: a private redis-server on a free port (BENCH_REDIS_URL names another), flushed before each target; its CPU counts with the shared processes.',
  prepare,
  evaluate
}
