import { pairedRatio, roundsOf, thresholdCheck } from '../checks.ts'
import { type LoadRequest, type Measurement, runLoad } from '../load.ts'
import type { BenchContext, Check, Evaluation, PreparedScenario, RunningTarget, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import type { BenchSettings } from '../settings.ts'
import { benchAuth, expectGreeting, startBenchServer, startExampleApp, startSidecarProcess } from '../targets.ts'
import { findRedis, flushRedis, redisUrl } from './bench-redis.ts'
import { prefix, webhookPhase } from './webhooks.ts'

/**
 * Issue 15: what a recorded call costs. A sync call with its own Idempotency-Key (claimed,
 * recorded, its answer kept) against a plain call, both with RUN_STORE_URL=redis; and a call whose
 * webhook is delivered durably (written to Redis first) against the plain call, for the CPU one
 * delivery costs. Targets: idempotent ≥ 0.7× plain calls/s; CPU per delivery ≤ CPU per call.
 */
const PROJECT_ID = 'bench'
const APP_NAME = 'app'
const BODY = '{"name":"Ada"}'
const IDEMPOTENT_TARGET = 0.7
const DELIVERY_CPU_TARGET = 1

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const app = await startExampleApp(ctx)
  const receiver = await startBenchServer(ctx, 'webhook-receiver', 'webhook-receiver.ts')
  const { jwks, token } = await benchAuth(PROJECT_ID)
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${token}` }
  const redis = await findRedis()
  const redisMissing = 'skip' in redis ? redis.skip : undefined
  const hook = encodeURIComponent(`${receiver.origin}/hook`)

  const target = (id: string, label: string, env: NodeJS.ProcessEnv, kind: 'plain' | 'idempotent' | 'webhook'): TargetDef => ({
    id,
    label,
    ...(env.RUN_STORE_URL !== undefined && redisMissing !== undefined ? { skipReason: redisMissing } : {}),
    start: async (): Promise<RunningTarget> => {
      if (env.RUN_STORE_URL !== undefined) await flushRedis()
      // no webhook is dropped for the bounds (WEBHOOK_MAX_PENDING): every one is delivered, so its whole cost is measured
      const sidecar = await startSidecarProcess(ctx, {
        appOrigin: app.origin, jwksUrl: jwks.url, logLevel: 'warn', name: id, env: { PROJECT_ID, APP_NAME, WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_MAX_PENDING: '100000', ...env }
      })
      const request: LoadRequest = {
        url: `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/run${kind === 'webhook' ? `?webhookEndpoint=${hook}` : ''}`, method: 'POST', headers, body: BODY
      }
      // every call its own id (and, for the idempotent target, its own key: each one a first request)
      const ids = (settings: BenchSettings): Parameters<typeof runLoad>[1] => ({
        connections: settings.connections,
        durationSeconds: settings.durationSeconds,
        requestIds: { prefix: prefix(), ...(kind === 'idempotent' ? { header: 'idempotency-key' } : {}) }
      })
      return {
        request,
        checkResponse: expectGreeting,
        children: [sidecar.child],
        runPhase: kind === 'webhook'
          ? async (_phase, settings) => await webhookPhase(request, settings, sidecar.adminOrigin, receiver)
          : async (_phase, settings) => await runLoad(request, ids(settings)),
        stop: async () => { await sidecar.child.stop() }
      }
    }
  })

  const shared = { RUN_STORE_URL: redisUrl() }
  return {
    targets: [
      target('plain-redis', 'plain calls, RUN_STORE_URL=redis', shared, 'plain'),
      target('idempotent-redis', 'every call its own Idempotency-Key, Redis', shared, 'idempotent'),
      target('webhooks-redis', 'webhookEndpoint on every call, durable delivery (Redis)', shared, 'webhook'),
      target('plain', 'plain calls, no RUN_STORE_URL', {}, 'plain'),
      target('idempotent-memory', 'every call its own Idempotency-Key, memory', {}, 'idempotent'),
      target('webhooks-memory', 'webhookEndpoint on every call, in memory', {}, 'webhook')
    ],
    children: [app.child, receiver.child],
    ...('pid' in redis && Number.isInteger(redis.pid) ? { outsideProcesses: async () => ({ 'redis-server': redis.pid }) } : {}),
    close: async () => {
      await app.child.stop()
      await receiver.child.stop()
      await jwks.close()
    }
  }
}

const cpuPerCall = (m: Measurement): number => m.cpu?.targetUsPerRequest ?? NaN

function evaluate (results: TargetResult[]): Evaluation {
  const plain = roundsOf(results, 'plain-redis', 'throughput')
  const idempotent = pairedRatio('idempotent/plain', 'calls/s with their own Idempotency-Key / plain calls, both with Redis', '×',
    roundsOf(results, 'idempotent-redis', 'throughput'), plain, (x, y) => x.rps / y.rps)
  const memory = pairedRatio('idempotent-memory/plain', 'calls/s with their own Idempotency-Key in memory / plain calls without RUN_STORE_URL', '×',
    roundsOf(results, 'idempotent-memory', 'throughput'), roundsOf(results, 'plain', 'throughput'), (x, y) => x.rps / y.rps)
  const delivery = pairedRatio('delivery/call', 'sidecar CPU per durable delivery (CPU per call with a webhook − per plain call) / CPU per plain call', '×',
    roundsOf(results, 'webhooks-redis', 'throughput'), plain, (x, y) => (cpuPerCall(x) - cpuPerCall(y)) / cpuPerCall(y))
  const memoryDelivery = pairedRatio('memory-delivery/call', 'the same in memory (no RUN_STORE_URL): CPU per delivery / CPU per plain call', '×',
    roundsOf(results, 'webhooks-memory', 'throughput'), roundsOf(results, 'plain', 'throughput'), (x, y) => (cpuPerCall(x) - cpuPerCall(y)) / cpuPerCall(y))
  const checks: Check[] = [
    thresholdCheck(`an idempotent sync call ≥ ${IDEMPOTENT_TARGET}× the throughput of a plain one (Redis)`, idempotent, IDEMPOTENT_TARGET, true),
    thresholdCheck('a webhook delivery costs the sidecar no more CPU than the call it reports on', delivery, DELIVERY_CPU_TARGET + 1e-9, false)
  ]
  return { ratios: [idempotent, memory, delivery, memoryDelivery], checks }
}

export const recordedScenario: Scenario = {
  name: 'recorded',
  baselineId: 'plain-redis',
  description: 'the cost of a recorded call: every call its own Idempotency-Key (Redis and memory) and a durably delivered webhook on every call, against plain calls with RUN_STORE_URL=redis',
  phases: [{
    id: 'throughput',
    label: 'max throughput',
    run: async (request, settings) => await runLoad(request, { connections: settings.connections, durationSeconds: settings.durationSeconds }),
    columns: [{ key: 'received', label: 'webhooks received', combine: 'sum' }, { key: 'duplicates', label: 'dupl.', combine: 'sum' }, { key: 'missing', label: 'missing', combine: 'sum' }]
  }],
  method: settings =>
    `Max throughput: autocannon, ${settings.connections} connections, ${settings.durationSeconds} s, auth on (a cached token), json-post's POST /run; ` +
    'every call its own X-Request-Id, and on the idempotent targets its own Idempotency-Key (each a first request: claimed, recorded as a run, its answer kept). ' +
    'The webhook target waits after the load until every delivery has finished and matches them at the receiver (as the webhooks scenario does): ' +
    'its CPU per call minus the plain target\'s is the CPU one durable delivery costs. Redis: BENCH_REDIS_URL (flushed before each target); its CPU counts with the shared processes.',
  prepare,
  evaluate
}
