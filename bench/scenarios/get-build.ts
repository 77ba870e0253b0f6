import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { ownFigure, pairedRatio, roundsOf, thresholdCheck } from '../checks.ts'
import { measureThroughput, type LoadRequest, type Measurement } from '../load.ts'
import { type BenchSchema, createBenchSchema, safeUrl } from '../postgres-schema.ts'
import type { BenchContext, Check, Evaluation, PreparedScenario, Ratio, RunningTarget, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import { nginxSkipReason, serverTarget, startBuildStoreProcess, startFloorProxy, startNginx, startSidecarProcess, type StartedServer } from '../targets.ts'

/**
 * Issues 5 and 17: Get Build through the sidecar (`/v2` forwarded with its Authorization), from
 * the store directly and through the Node floor, on both backends (embedded PGlite, PostgreSQL).
 * Targets: the sidecar's CPU per forwarded request ≤ 1.1× the floor's; the embedded store ≥ 5,000
 * Get Builds/s. nginx in front of the embedded store prices a plain proxy hop.
 */
const PROJECT = 'p'
const APP = 'a'
const BUILD = 'b'
const PATH = `/v2/projects/${PROJECT}/apps/${APP}/builds/${BUILD}`
const FLOOR_CPU_TARGET = 1.1
const EMBEDDED_RPS_TARGET = 5000

/** A build with a realistic set of fields (the store fills in id, projectId, modelId and the times). */
const BUILD_FIELDS = {
  name: 'bench-app',
  revisionName: 'bench-app-00001',
  status: 'success',
  type: 'deploy',
  createdByUserEmail: 'bench@example.com',
  buildTimeMs: '48211',
  runtime: 'cortex',
  pythonVersion: '3.11',
  dockerBaseImageUrl: 'debian:bookworm-slim',
  hardware: 'CPU',
  region: 'us-east-1',
  cpu: 2,
  memory: 8,
  minReplicaCount: 0,
  maxReplicaCount: 5,
  replicaConcurrency: 8,
  cooldownPeriod: 60,
  scalingMetric: 'concurrency_utilization',
  scalingTarget: 70,
  responseGracePeriodSeconds: 900
}

async function adminCall (store: StartedServer, adminToken: string, method: 'PUT' | 'POST', path: string, body: unknown): Promise<unknown> {
  const response = await fetch(`${store.origin}${path}`, {
    method,
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000)
  })
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

function backendTargets (ctx: BenchContext, suffix: string, label: string, backend: Backend | undefined, skipReason: string | undefined): TargetDef[] {
  const request = (origin: string, token: string): LoadRequest => ({ url: `${origin}${PATH}`, method: 'GET', headers: { authorization: `Bearer ${token}` } })
  const skip = skipReason === undefined ? {} : { skipReason }
  return [
    {
      id: `direct${suffix}`,
      label: `direct (store, ${label})`,
      ...skip,
      start: async (): Promise<RunningTarget> => {
        if (backend === undefined) throw new Error('no store')
        return { request: request(backend.store.origin, backend.token), checkResponse: expectBuild, children: [], stop: async () => {} }
      }
    },
    {
      id: `floor${suffix}`,
      label: `the Node floor → store (${label})`,
      ...skip,
      start: async (): Promise<RunningTarget> => {
        if (backend === undefined) throw new Error('no store')
        return await serverTarget(async () => await startFloorProxy(ctx, backend.store.origin), origin => request(origin, backend.token), expectBuild)()
      }
    },
    {
      id: `sidecar${suffix}`,
      label: `sidecar → store (${label})`,
      ...skip,
      start: async (bin?: string): Promise<RunningTarget> => {
        if (backend === undefined) throw new Error('no store')
        const sidecar = await startSidecarProcess(ctx, {
          // Nothing calls /v4 here: the store's listener only satisfies the sidecar's TCP ready check.
          appOrigin: backend.store.origin,
          jwksUrl: new URL('/.well-known/jwks.json', backend.store.origin),
          logLevel: 'info',
          name: `sidecar${suffix}`,
          bin
        })
        return {
          request: request(sidecar.origin, backend.token),
          checkResponse: expectBuild,
          children: [sidecar.child],
          notes: ['STORE_URL = the store; /v2 forwarded with Authorization unchanged; LOG_LEVEL=info'],
          stop: async () => { await sidecar.child.stop() }
        }
      }
    }
  ]
}

/** nginx in front of a store: the same GET, the Authorization passed unchanged, nothing else. */
function nginxTarget (ctx: BenchContext, backend: Backend): TargetDef {
  const skipReason = nginxSkipReason()
  return {
    id: 'nginx',
    label: 'nginx → store (embedded)',
    ...(skipReason === undefined ? {} : { skipReason }),
    start: serverTarget(async () => await startNginx(ctx, backend.store.port),
      origin => ({ url: `${origin}${PATH}`, method: 'GET', headers: { authorization: `Bearer ${backend.token}` } }), expectBuild)
  }
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
    let pgSkip: string | undefined
    if (!ctx.settings.postgres) {
      pgSkip = 'BENCH_POSTGRES=0'
    } else {
      try {
        schema = await createBenchSchema(ctx.settings.databaseUrl)
      } catch (error) {
        pgSkip = `no PostgreSQL reachable at ${safeUrl(ctx.settings.databaseUrl)} (${error instanceof Error ? error.message : String(error)})`
      }
      if (schema !== undefined) {
        const store = await startBuildStoreProcess(ctx, { name: 'store-postgres', adminToken, databaseUrl: schema.url })
        started.push(store)
        pgBackend = { store, token: await seed(store, adminToken) }
      }
    }
    const pg = schema
    return {
      targets: [
        ...backendTargets(ctx, '', 'embedded', embeddedBackend, undefined),
        nginxTarget(ctx, embeddedBackend),
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
  const rounds = (id: string): ReturnType<typeof roundsOf> => roundsOf(results, id, 'throughput')
  const cpu = (x: Measurement, y: Measurement): number => (x.cpu?.targetUsPerRequest ?? NaN) / (y.cpu?.targetUsPerRequest ?? NaN)
  const ratios: Ratio[] = [
    pairedRatio('cpu/sidecar/floor', 'embedded: CPU per Get Build, sidecar / the Node floor (the proxy processes alone)', '×', rounds('sidecar'), rounds('floor'), cpu),
    pairedRatio('cpu/sidecar-pg/floor-pg', 'PostgreSQL: CPU per Get Build, sidecar / the Node floor', '×', rounds('sidecar-pg'), rounds('floor-pg'), cpu),
    pairedRatio('sidecar/floor', 'embedded: sidecar / the Node floor, Get Builds/s', '×', rounds('sidecar'), rounds('floor'), (x, y) => x.rps / y.rps),
    pairedRatio('sidecar/direct', 'embedded: sidecar / direct, Get Builds/s', '×', rounds('sidecar'), rounds('direct'), (x, y) => x.rps / y.rps),
    pairedRatio('floor/direct', 'embedded: the Node floor / direct, Get Builds/s', '×', rounds('floor'), rounds('direct'), (x, y) => x.rps / y.rps),
    pairedRatio('sidecar-pg/direct-pg', 'PostgreSQL: sidecar / direct, Get Builds/s', '×', rounds('sidecar-pg'), rounds('direct-pg'), (x, y) => x.rps / y.rps),
    ownFigure('direct/rps', 'embedded store, Get Builds/s directly', 'req/s', rounds('direct'), x => x.rps),
    ownFigure('direct-pg/rps', 'PostgreSQL store, Get Builds/s directly', 'req/s', rounds('direct-pg'), x => x.rps)
  ]
  if (results.some(r => r.id === 'nginx' && r.skipped === undefined)) {
    ratios.push(
      pairedRatio('nginx/direct', 'embedded: nginx / direct, Get Builds/s', '×', rounds('nginx'), rounds('direct'), (x, y) => x.rps / y.rps),
      pairedRatio('sidecar/nginx', 'embedded: sidecar / nginx, Get Builds/s', '×', rounds('sidecar'), rounds('nginx'), (x, y) => x.rps / y.rps),
      pairedRatio('cpu/sidecar/nginx', 'embedded: CPU per Get Build, sidecar / nginx (the proxy processes alone)', '×', rounds('sidecar'), rounds('nginx'), cpu)
    )
  }
  const ratio = (id: string): Ratio => ratios.find(r => r.id === id) as Ratio
  const pgSkipped = results.find(r => r.id === 'direct-pg')?.skipped
  const checks: Check[] = [
    thresholdCheck(`embedded: the sidecar's CPU per forwarded Get Build ≤ ${FLOOR_CPU_TARGET}× the Node floor's`, ratio('cpu/sidecar/floor'), FLOOR_CPU_TARGET + 1e-9, false),
    pgSkipped === undefined
      ? thresholdCheck(`PostgreSQL: the sidecar's CPU per forwarded Get Build ≤ ${FLOOR_CPU_TARGET}× the Node floor's`, ratio('cpu/sidecar-pg/floor-pg'), FLOOR_CPU_TARGET + 1e-9, false)
      : { label: `PostgreSQL: the sidecar's CPU per forwarded Get Build ≤ ${FLOOR_CPU_TARGET}× the Node floor's`, status: 'N/A', detail: `skipped: ${pgSkipped}` },
    thresholdCheck(`embedded store ≥ ${EMBEDDED_RPS_TARGET.toLocaleString('en-US')} Get Builds/s (directly)`, ratio('direct/rps'), EMBEDDED_RPS_TARGET, true)
  ]
  return {
    ratios,
    checks,
    notes: ['the app column (CPU µs/req) is the store process, plus its PostgreSQL backends on the PostgreSQL rows']
  }
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
