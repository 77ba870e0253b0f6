import { atMost, type Compare, pairRatios, rps, thresholdCheck } from '../checks.ts'
import { runLoad } from '../load.ts'
import type { BenchContext, Evaluation, PreparedScenario, Ratio, Scenario, TargetResult } from '../scenario.ts'
import { expectGreeting, runRequest, shareServers, sidecarTarget, startBenchServer, startExampleApp } from '../targets.ts'
import { flushRedis } from '../../test/helpers/redis-server.ts'
import { findRedis } from './bench-redis.ts'
import { loadWithIds, prefix, WEBHOOK_COLUMNS, webhookPhase } from './webhooks.ts'

/**
 * Issue 15: what a recorded call costs. A sync call with its own Idempotency-Key (claimed,
 * recorded, its answer kept) against a plain call, both with RUN_STORE_URL=redis; and a call whose
 * webhook is delivered durably (written to Redis first) against the plain call, for the CPU one
 * delivery costs. Targets: idempotent ≥ 0.7× plain calls/s; CPU per delivery ≤ CPU per call.
 */
const IDEMPOTENT_TARGET = 0.7
const DELIVERY_CPU_TARGET = 1

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app, receiver }, jwks, token, prepared } = await shareServers(ctx, { app: startExampleApp, receiver: c => startBenchServer(c, 'webhook-receiver') })
  const redis = await findRedis(ctx.settings.redisUrl)
  const hook = `?webhookEndpoint=${encodeURIComponent(`${receiver.origin}/hook`)}`
  const target = (id: string, label: string, withRedis: boolean, kind: 'plain' | 'idempotent' | 'webhook') => sidecarTarget(ctx, {
    id,
    label,
    ...(withRedis && 'skip' in redis ? { skipReason: redis.skip } : {}),
    ...(withRedis ? { beforeStart: async () => { await flushRedis(ctx.settings.redisUrl) } } : {}),
    logLevel: 'warn',
    appOrigin: app.origin,
    jwksUrl: jwks.url,
    // no webhook is dropped for the bounds (WEBHOOK_MAX_PENDING): every one is delivered, so its whole cost is measured
    env: { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_MAX_PENDING: '100000', ...(withRedis ? { RUN_STORE_URL: ctx.settings.redisUrl } : {}) },
    request: origin => runRequest(origin, token, kind === 'webhook' ? hook : ''),
    checkResponse: expectGreeting,
    running: (sidecar, request) => ({
      // every call its own id (and, for the idempotent target, its own key: each one a first request)
      runPhase: kind === 'webhook'
        ? async (_phase, settings) => await webhookPhase(request, settings, sidecar.adminOrigin, receiver)
        : async (_phase, settings) => await loadWithIds(request, settings, { prefix: prefix(), ...(kind === 'idempotent' ? { header: 'idempotency-key' } : {}) })
    })
  })
  return prepared([
    target('plain-redis', 'plain calls, RUN_STORE_URL=redis', true, 'plain'),
    target('idempotent-redis', 'every call its own Idempotency-Key, Redis', true, 'idempotent'),
    target('webhooks-redis', 'webhookEndpoint on every call, durable delivery (Redis)', true, 'webhook'),
    target('plain', 'plain calls, no RUN_STORE_URL', false, 'plain'),
    target('idempotent-memory', 'every call its own Idempotency-Key, memory', false, 'idempotent'),
    target('webhooks-memory', 'webhookEndpoint on every call, in memory', false, 'webhook')
  ], 'pid' in redis && Number.isInteger(redis.pid) ? { outsideProcesses: async () => ({ 'redis-server': redis.pid }) } : {})
}

/** CPU per delivery / CPU per plain call: the webhook target's CPU per call less the plain one's, over the plain one's. */
const deliveryCpu: Compare = (x, y) => ((x.cpu?.targetUsPerRequest ?? NaN) - (y.cpu?.targetUsPerRequest ?? NaN)) / (y.cpu?.targetUsPerRequest ?? NaN)

function evaluate (results: TargetResult[]): Evaluation {
  const [idempotent, memory] = pairRatios(results, 'throughput', '×', rps, [
    ['idempotent/plain', 'calls/s with their own Idempotency-Key / plain calls, both with Redis', 'idempotent-redis', 'plain-redis'],
    ['idempotent-memory/plain', 'calls/s with their own Idempotency-Key in memory / plain calls without RUN_STORE_URL', 'idempotent-memory', 'plain']
  ]) as [Ratio, Ratio]
  const [delivery, memoryDelivery] = pairRatios(results, 'throughput', '×', deliveryCpu, [
    ['delivery/call', 'sidecar CPU per durable delivery (CPU per call with a webhook − per plain call) / CPU per plain call', 'webhooks-redis', 'plain-redis'],
    ['memory-delivery/call', 'the same in memory (no RUN_STORE_URL): CPU per delivery / CPU per plain call', 'webhooks-memory', 'plain']
  ]) as [Ratio, Ratio]
  return {
    ratios: [idempotent, memory, delivery, memoryDelivery],
    checks: [
      thresholdCheck(`an idempotent sync call ≥ ${IDEMPOTENT_TARGET}× the throughput of a plain one (Redis)`, idempotent, IDEMPOTENT_TARGET, true),
      atMost('a webhook delivery costs the sidecar no more CPU than the call it reports on', delivery, DELIVERY_CPU_TARGET)
    ]
  }
}

export const recordedScenario: Scenario = {
  name: 'recorded',
  baselineId: 'plain-redis',
  description: 'the cost of a recorded call: every call its own Idempotency-Key (Redis and memory) and a durably delivered webhook on every call, against plain calls with RUN_STORE_URL=redis',
  phases: [{
    id: 'throughput',
    label: 'max throughput',
    run: async (request, settings) => await runLoad(request, { connections: settings.connections, durationSeconds: settings.durationSeconds }),
    columns: WEBHOOK_COLUMNS
  }],
  method: settings =>
    `Max throughput: autocannon, ${settings.connections} connections, ${settings.durationSeconds} s, auth on (a cached token), json-post's POST /run; ` +
    'every call its own X-Request-Id, and on the idempotent targets its own Idempotency-Key (each a first request: claimed, recorded as a run, its answer kept). ' +
    'The webhook target waits after the load until every delivery has finished and matches them at the receiver (as the webhooks scenario does): ' +
    'its CPU per call minus the plain target\'s is the CPU one durable delivery costs. Redis: BENCH_REDIS_URL (flushed before each target); its CPU counts with the shared processes.',
  prepare,
  evaluate
}
