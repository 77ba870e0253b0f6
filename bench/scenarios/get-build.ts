import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { atMost, cpuPerRequest, ownFigure, pairRatios, ran, ratioById, roundsOf, rps, thresholdCheck } from '../checks.ts'
import { measureThroughput, type LoadRequest } from '../load.ts'
import { type BenchSchema, createBenchSchema, safeUrl } from '../postgres-schema.ts'
import type { BenchContext, Check, Evaluation, PreparedScenario, Ratio, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import { directTarget, proxyTarget, sidecarTarget, startBuildStoreProcess, type StartedServer } from '../targets.ts'

/**
 * Issues 5 and 17: Get Build from the store directly, through the Node floor and the sidecar (`/v2`
 * forwarded), on both backends (embedded PGlite, PostgreSQL); nginx prices a plain hop. Targets: the
 * sidecar's CPU per request ≤ 1.1× the floor's; the embedded store ≥ 5,000 Get Builds/s.
 */
const PROJECT = 'p'
const APP = 'a'
const BUILD = 'b'
const PATH = `/v2/projects/${PROJECT}/apps/${APP}/builds/${BUILD}`
const FLOOR_CPU_TARGET = 1.1
const EMBEDDED_RPS_TARGET = 5000

/** A build with a realistic set of fields (the store fills in id, projectId, modelId and the times). */
const BUILD_FIELDS = {
  name: 'bench-app', revisionName: 'bench-app-00001', status: 'success', type: 'deploy', createdByUserEmail: 'bench@example.com', buildTimeMs: '48211',
  runtime: 'cortex', pythonVersion: '3.11', dockerBaseImageUrl: 'debian:bookworm-slim', hardware: 'CPU', region: 'us-east-1', cpu: 2, memory: 8,
  minReplicaCount: 0, maxReplicaCount: 5, replicaConcurrency: 8, cooldownPeriod: 60, scalingMetric: 'concurrency_utilization', scalingTarget: 70,
  responseGracePeriodSeconds: 900
}

async function adminCall (store: StartedServer, adminToken: string, method: 'PUT' | 'POST', path: string, body: unknown): Promise<unknown> {
  const response = await fetch(`${store.origin}${path}`,
    { method, headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(30_000) })
  const text = await response.text()
  if (response.status >= 300) throw new Error(`${method} ${path}: ${response.status} ${text.slice(0, 300)}`)
  return JSON.parse(text)
}

/** Puts the build and creates a service account of the project; returns its token. */
async function seed (store: StartedServer, adminToken: string): Promise<string> {
  await adminCall(store, adminToken, 'PUT', PATH, BUILD_FIELDS)
  const expiresAt = new Date(Date.now() + 24 * 3600 * 1000).toISOString()
  const account = await adminCall(store, adminToken, 'POST', `/v2/projects/${PROJECT}/service-accounts`, { name: 'bench', expiresAt }) as { token?: unknown }
  if (typeof account.token !== 'string') throw new Error('the store created a service account without a token')
  return account.token
}

const expectBuild = (status: number, body: string): void => {
  if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
  const build = JSON.parse(body) as { id?: unknown, name?: unknown }
  if (build.id !== BUILD || build.name !== BUILD_FIELDS.name) throw new Error(`unexpected build: ${body.slice(0, 200)}`)
}

interface Backend { store: StartedServer, token: string }

/** The Get Build with `token`, to `origin`. */
const buildRequest = (token: string) => (origin: string): LoadRequest => ({ url: `${origin}${PATH}`, method: 'GET', headers: { authorization: `Bearer ${token}` } })

/** direct, the Node floor and the sidecar in front of one store (`backend` undefined: skipped for `skipReason`). */
function backendTargets (ctx: BenchContext, suffix: string, label: string, backend: Backend | undefined, skipReason: string | undefined): TargetDef[] {
  const request = buildRequest(backend?.token ?? '')
  const skip = skipReason === undefined ? {} : { skipReason }
  const store = backend?.store
  return [
    { ...directTarget(`direct${suffix}`, `direct (store, ${label})`, request(store?.origin ?? ''), expectBuild), ...skip },
    { ...proxyTarget(ctx, 'floor', `the Node floor → store (${label})`, store, request, expectBuild, `floor${suffix}`), ...skip },
    sidecarTarget(ctx, {
      id: `sidecar${suffix}`,
      label: `sidecar → store (${label})`,
      ...skip,
      // Nothing calls /v4 here: the store's listener only satisfies the sidecar's TCP ready check.
      appOrigin: store?.origin ?? '',
      jwksUrl: new URL('/.well-known/jwks.json', store?.origin ?? 'http://unused'),
      env: { PROJECT_ID: undefined, APP_NAME: undefined }, // none: only /v2 is called
      request,
      checkResponse: expectBuild,
      notes: ['STORE_URL = the store; /v2 forwarded with Authorization unchanged; LOG_LEVEL=info']
    })
  ]
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const adminToken = randomBytes(24).toString('hex')
  const started: StartedServer[] = []
  let schema: BenchSchema | undefined
  const close = async (): Promise<void> => {
    for (const server of started) await server.child.stop()
    await schema?.drop().catch((error: unknown) => { process.stderr.write(`bench: could not drop schema ${schema?.name}: ${String(error)}\n`) })
  }
  try {
    const embedded = await startBuildStoreProcess(ctx, { name: 'store-embedded', adminToken, dataDir: join(ctx.tmpDir, 'store-data') })
    started.push(embedded)
    const embeddedBackend: Backend = { store: embedded, token: await seed(embedded, adminToken) }

    let pgBackend: Backend | undefined
    let pgSkip = ctx.settings.postgres ? undefined : 'BENCH_POSTGRES=0'
    if (pgSkip === undefined) {
      schema = await createBenchSchema(ctx.settings.databaseUrl).catch((error: unknown) => {
        pgSkip = `no PostgreSQL reachable at ${safeUrl(ctx.settings.databaseUrl)} (${error instanceof Error ? error.message : String(error)})`
        return undefined
      })
    }
    if (schema !== undefined) {
      const store = await startBuildStoreProcess(ctx, { name: 'store-postgres', adminToken, databaseUrl: schema.url })
      started.push(store)
      pgBackend = { store, token: await seed(store, adminToken) }
    }
    const pg = schema
    return {
      targets: [
        ...backendTargets(ctx, '', 'embedded', embeddedBackend, undefined),
        // nginx in front of the embedded store: the same GET, the Authorization passed unchanged, nothing else
        proxyTarget(ctx, 'nginx', 'nginx → store (embedded)', embedded, buildRequest(embeddedBackend.token), expectBuild),
        ...backendTargets(ctx, '-pg', 'PostgreSQL', pgBackend, pgSkip)
      ],
      children: started.map(s => s.child),
      ...(pg === undefined ? {} : { outsideProcesses: pg.backends }),
      close
    }
  } catch (error) {
    await close()
    throw error
  }
}

function evaluate (results: TargetResult[]): Evaluation {
  const both = 'Get Builds/s'
  const ratios: Ratio[] = [
    ...pairRatios(results, 'throughput', '×', cpuPerRequest, [
      ['cpu/sidecar/floor', 'embedded: CPU per Get Build, sidecar / the Node floor (the proxy processes alone)', 'sidecar', 'floor'],
      ['cpu/sidecar-pg/floor-pg', 'PostgreSQL: CPU per Get Build, sidecar / the Node floor', 'sidecar-pg', 'floor-pg']]),
    ...pairRatios(results, 'throughput', '×', rps, [
      ['sidecar/floor', `embedded: sidecar / the Node floor, ${both}`, 'sidecar', 'floor'],
      ['sidecar/direct', `embedded: sidecar / direct, ${both}`, 'sidecar', 'direct'],
      ['floor/direct', `embedded: the Node floor / direct, ${both}`, 'floor', 'direct'],
      ['sidecar-pg/direct-pg', `PostgreSQL: sidecar / direct, ${both}`, 'sidecar-pg', 'direct-pg']]),
    ownFigure('direct/rps', 'embedded store, Get Builds/s directly', 'req/s', roundsOf(results, 'direct', 'throughput'), x => x.rps),
    ownFigure('direct-pg/rps', 'PostgreSQL store, Get Builds/s directly', 'req/s', roundsOf(results, 'direct-pg', 'throughput'), x => x.rps)
  ]
  if (ran(results, 'nginx')) {
    ratios.push(...pairRatios(results, 'throughput', '×', rps, [['nginx/direct', `embedded: nginx / direct, ${both}`, 'nginx', 'direct'], ['sidecar/nginx', `embedded: sidecar / nginx, ${both}`, 'sidecar', 'nginx']]),
      ...pairRatios(results, 'throughput', '×', cpuPerRequest, [['cpu/sidecar/nginx', 'embedded: CPU per Get Build, sidecar / nginx (the proxy processes alone)', 'sidecar', 'nginx']]))
  }
  const pgSkipped = results.find(r => r.id === 'direct-pg')?.skipped
  const pgLabel = `PostgreSQL: the sidecar's CPU per forwarded Get Build ≤ ${FLOOR_CPU_TARGET}× the Node floor's`
  const checks: Check[] = [
    atMost(pgLabel.replace('PostgreSQL', 'embedded'), ratioById(ratios, 'cpu/sidecar/floor'), FLOOR_CPU_TARGET),
    pgSkipped === undefined ? atMost(pgLabel, ratioById(ratios, 'cpu/sidecar-pg/floor-pg'), FLOOR_CPU_TARGET) : { label: pgLabel, status: 'N/A', detail: `skipped: ${pgSkipped}` },
    thresholdCheck(`embedded store ≥ ${EMBEDDED_RPS_TARGET.toLocaleString('en-US')} Get Builds/s (directly)`, ratioById(ratios, 'direct/rps'), EMBEDDED_RPS_TARGET, true)
  ]
  return { ratios, checks, notes: ['the app column (CPU µs/req) is the store process, plus its PostgreSQL backends on the PostgreSQL rows'] }
}

export const getBuildScenario: Scenario = {
  name: 'get-build',
  baselineId: 'direct',
  description: `GET ${PATH} with a service-account token, from the build store bin directly, through the Node floor and through the sidecar, on the embedded and the PostgreSQL backend; through nginx on the embedded one`,
  phases: [{ id: 'throughput', label: 'max throughput', run: measureThroughput }],
  method: settings =>
    `Max throughput: autocannon, ${settings.connections} connections, pipelining 1. Both stores run the whole scenario (ADMIN_TOKEN set by the bench; ` +
    'the build put and the service account created through the admin API); PostgreSQL in a schema of its own, dropped at the end. ' +
    'Latencies in ms, 2xx only; CPU µs/req = the sidecar (or nginx), and the store (with its database backends).',
  beforeIds: ['sidecar'],
  prepare,
  evaluate
}
