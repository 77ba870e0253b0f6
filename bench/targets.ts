import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createTokenIssuer, type JwksServer, serveJwks } from '../test/helpers/demo-token-issuer.ts'
import { type BenchChild, freePort, spawnChild, waitForHttp200, waitForPort } from './child-processes.ts'
import { findNginx, nginxConfig } from './nginx-config.ts'
import type { LoadRequest } from './load.ts'
import type { BenchContext, PreparedScenario, RunningTarget, TargetDef } from './scenario.ts'

/**
 * Starting the servers under test, each as its own process waited for until it is ready, and the
 * target shapes the scenarios share (the app reached directly, a proxy in front of it, a sidecar).
 */
export interface StartedServer {
  readonly child: BenchChild
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly origin: string
}

export const PROJECT_ID = 'bench'
export const APP_NAME = 'app'
export const GREETING_BODY = '{"name":"Ada"}'
const JSON_TYPE = { 'content-type': 'application/json' }

/** json-post's call through a sidecar: `POST /v4/bench/app/run{query}` with `{"name":"Ada"}` and, when given, a bearer token. */
export const runRequest = (origin: string, token?: string, query = ''): LoadRequest => ({
  url: `${origin}/v4/${PROJECT_ID}/${APP_NAME}/run${query}`,
  method: 'POST',
  headers: token === undefined ? JSON_TYPE : { ...JSON_TYPE, authorization: `Bearer ${token}` },
  body: GREETING_BODY
})

/** The same call made to the example app itself (directly or through a plain proxy): `POST /run`. */
export const appRunRequest = (origin: string): LoadRequest => ({ url: `${origin}/run`, method: 'POST', headers: JSON_TYPE, body: GREETING_BODY })

function greeting (status: number, body: string, enveloped: boolean): void {
  if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
  const parsed = JSON.parse(body) as { greeting?: unknown, result?: { greeting?: unknown } }
  if ((enveloped ? parsed.result?.greeting : parsed.greeting) !== 'Hello, Ada!') throw new Error(`unexpected body: ${body.slice(0, 200)}`)
}

/** Checks the greeting of a cortex sidecar (in the envelope's `result`). */
export const expectGreeting = (status: number, body: string): void => { greeting(status, body, true) }
/** Checks the example app's own greeting (directly, through a plain proxy, or a RUNTIME=custom sidecar). */
export const expectRawGreeting = (status: number, body: string): void => { greeting(status, body, false) }

/** A target that is a shared server reached directly (no process of its own). */
export const directTarget = (id: string, label: string, request: LoadRequest, checkResponse: RunningTarget['checkResponse']): TargetDef =>
  ({ id, label, start: async () => ({ request, checkResponse, children: [], stop: async () => {} }) })

/**
 * A plain proxy of its own in front of `upstream` (undefined only on a skipped target): the Node
 * floor, the bare http-proxy or nginx (skipped when not installed); called with `request(origin)`.
 */
export function proxyTarget (ctx: BenchContext, kind: 'floor' | 'floor-contract' | 'http-proxy' | 'nginx', label: string, upstream: StartedServer | undefined,
  request: (origin: string) => LoadRequest, checkResponse: RunningTarget['checkResponse'], id: string = kind, env: NodeJS.ProcessEnv = {}): TargetDef {
  const skipReason = kind === 'nginx' ? nginxSkipReason() : undefined
  return {
    id,
    label,
    ...(skipReason === undefined ? {} : { skipReason }),
    start: async () => {
      if (upstream === undefined) throw new Error(`${id}: nothing to proxy`)
      const server = kind === 'nginx'
        ? await startNginx(ctx, upstream.port)
        : await startProxyScript(ctx, kind === 'http-proxy' ? 'bare-http-proxy' : `${kind}-proxy`, upstream.origin, env)
      return { request: request(server.origin), checkResponse, children: [server.child], stop: async () => { await server.child.stop() } }
    }
  }
}

export interface SidecarTargetDef extends Omit<SidecarStartOptions, 'bin' | 'logLevel'>, Pick<TargetDef, 'id' | 'label' | 'phases' | 'skipReason'> {
  /** Default info (the sidecar as shipped). */
  logLevel?: SidecarStartOptions['logLevel']
  request: (origin: string) => LoadRequest
  checkResponse: RunningTarget['checkResponse']
  notes?: string[]
  /** Runs before the sidecar starts (a store flushed). */
  beforeStart?: () => Promise<void>
  /** More of the running target (its own `runPhase`), given the started sidecar and its request. */
  running?: (sidecar: StartedSidecar, request: LoadRequest) => Partial<RunningTarget>
}

/**
 * A target that is one sidecar process (`PROJECT_ID=bench`, `APP_NAME=app` and `env`; child name
 * `name` or the id); `start(bin)` runs another build (BENCH_BEFORE_BIN, see Scenario.beforeIds).
 */
export function sidecarTarget (ctx: BenchContext, def: SidecarTargetDef): TargetDef {
  const { id, label, phases, skipReason, request, checkResponse, notes, beforeStart, running, ...options } = def
  return {
    id,
    label,
    ...(phases === undefined ? {} : { phases }),
    ...(skipReason === undefined ? {} : { skipReason }),
    start: async (bin?: string) => {
      await beforeStart?.()
      const sidecar = await startSidecarProcess(ctx, {
        ...options, logLevel: options.logLevel ?? 'info', name: options.name ?? id, env: { PROJECT_ID, APP_NAME, ...options.env }, bin
      })
      const sent = request(sidecar.origin)
      return {
        request: sent,
        checkResponse,
        children: [sidecar.child],
        ...(notes === undefined ? {} : { notes }),
        ...running?.(sidecar, sent),
        stop: async () => { await sidecar.child.stop() }
      }
    }
  }
}

/**
 * Starts what a scenario's targets share, in order (`starts`: name → server), and benchAuth's key
 * set and token; `prepared` makes the scenario's PreparedScenario, whose `close` stops them all.
 */
export async function shareServers<K extends string> (ctx: BenchContext, starts: Record<K, (ctx: BenchContext) => Promise<StartedServer>>): Promise<{
  servers: Record<K, StartedServer>
  jwks: JwksServer
  token: string
  prepared: (targets: TargetDef[], more?: Pick<PreparedScenario, 'outsideProcesses'>) => PreparedScenario
}> {
  const servers = {} as Record<K, StartedServer>
  for (const name of Object.keys(starts) as K[]) servers[name] = await starts[name](ctx)
  const { jwks, token } = await benchAuth(PROJECT_ID)
  const all = Object.values<StartedServer>(servers)
  return {
    servers,
    jwks,
    token,
    prepared: (targets, more) => ({
      targets,
      children: all.map(s => s.child),
      ...more,
      close: async () => {
        for (const server of all) await server.child.stop()
        await jwks.close()
      }
    })
  }
}

/** Spawns a server of our own on a free port (PORT, HOST=127.0.0.1 and `env`), stopped again when `ready` throws. */
async function startServer (ctx: BenchContext, name: string, args: string[], env: NodeJS.ProcessEnv,
  ready: (child: BenchChild, port: number, origin: string) => Promise<void>, command = process.execPath, port?: number): Promise<StartedServer> {
  port ??= await freePort()
  const origin = `http://127.0.0.1:${port}`
  const child = spawnChild({ name, command, args, env: { PORT: String(port), HOST: '127.0.0.1', ...env }, cwd: command === process.execPath ? ctx.root : ctx.tmpDir, logDir: ctx.tmpDir })
  try {
    await ready(child, port, origin)
  } catch (error) {
    await child.stop(2000)
    throw error
  }
  return { child, port, origin }
}

const healthy = (path: string, timeoutMs?: number) => async (child: BenchChild, _port: number, origin: string): Promise<void> => {
  await waitForHttp200(child, `${origin}${path}`, timeoutMs)
}

/** The example app (`dist/demo/example-app.js`): POST /run {"name"} → {"greeting"}. */
export async function startExampleApp (ctx: BenchContext): Promise<StartedServer> {
  return await startServer(ctx, 'example-app', [join(ctx.root, 'dist/demo/example-app.js')], {}, healthy('/health'))
}

/** A bench-only server of bench/servers.ts (`stream-app`, `slow-app`, `large-body-app`, `webhook-receiver`, `otlp-receiver`), run with tsx. */
export async function startBenchServer (ctx: BenchContext, script: string, env: NodeJS.ProcessEnv = {}, name = script): Promise<StartedServer> {
  return await startServer(ctx, name, ['--import', 'tsx', join(ctx.root, 'bench/servers.ts'), script], env, healthy('/health'))
}

/** The build store bin: embedded PostgreSQL in `dataDir`, or `databaseUrl`; ready on `/healthz` (the embedded database takes a while). */
export async function startBuildStoreProcess (ctx: BenchContext, options: { name: string, adminToken: string, dataDir?: string, databaseUrl?: string }): Promise<StartedServer> {
  return await startServer(ctx, options.name, [...cpuProfArgs(ctx, options.name), join(ctx.root, 'dist/bin/build-store.js')], {
    ADMIN_TOKEN: options.adminToken,
    LOG_LEVEL: 'warn',
    // undefined drops a variable the bench itself may have (spawn skips undefined values)
    DATA_DIR: options.dataDir,
    DATABASE_URL: options.databaseUrl
  }, healthy('/healthz', 120_000))
}

/** The key set sidecars under test verify tokens against (`jwks.url`), and a token for `projectId` signed with it, valid for a day. */
export async function benchAuth (projectId: string): Promise<{ jwks: JwksServer, token: string }> {
  const issuer = await createTokenIssuer()
  const jwks = await serveJwks([issuer])
  return { jwks, token: await issuer.sign(projectId, { ttlSeconds: 24 * 3600 }) }
}

/**
 * A bench proxy in front of `appOrigin`, plain JavaScript on bare Node: bench/bare-http-proxy.mjs
 * (http-proxy with a keep-alive agent), bench/floor-proxy.mjs (the Node floor: undici's
 * Pool.dispatch and nothing else, issue 17) or bench/floor-contract-proxy.mjs (the floor plus what
 * the contract makes every plain call do, issue 40; `env`: its JWKS_URL, PROJECT_ID, APP_NAME);
 * ready when its port accepts.
 */
async function startProxyScript (ctx: BenchContext, name: 'bare-http-proxy' | 'floor-proxy' | 'floor-contract-proxy', appOrigin: string, env: NodeJS.ProcessEnv = {}): Promise<StartedServer> {
  return await startServer(ctx, name, [...cpuProfArgs(ctx, name), join(ctx.root, `bench/${name}.mjs`)], { ...env, TARGET_URL: appOrigin },
    async (child, port) => { await waitForPort(child, port) })
}

/**
 * A bench process in plain JavaScript, run on bare Node like the compiled sidecar (bench/<script>.mjs:
 * the BullMQ peer's producer and workers), with PORT, HOST and `env`; ready when GET /health answers 200.
 */
export async function startScriptServer (ctx: BenchContext, script: string, name: string, env: NodeJS.ProcessEnv): Promise<StartedServer> {
  return await startServer(ctx, name, [...cpuProfArgs(ctx, name), join(ctx.root, `bench/${script}.mjs`)], env, healthy('/health'))
}

export interface SidecarStartOptions {
  appOrigin: string
  jwksUrl: URL
  /** LOG_LEVEL of the sidecar (warn: the per-request lines are off). */
  logLevel: 'warn' | 'info'
  /** Extra environment (PROJECT_ID, RUNTIME, …). */
  env?: NodeJS.ProcessEnv
  /** Name of the child (and its log file); distinct per variant. */
  name?: string
  /** Flags for node itself, before the script (V8 flags NODE_OPTIONS does not allow, --inspect). */
  nodeArgs?: string[]
  /** Another build's bin (a before/after pair in one run; the child's name gets `-before`); default: see sidecarBin. */
  bin?: string
}

export type StartedSidecar = StartedServer & { adminOrigin: string }

/** The sidecar bin the bench starts: `BENCH_SIDECAR_BIN` when set (another build), else this checkout's. */
export function sidecarBin (ctx: BenchContext): string {
  return ctx.settings.sidecarBin ?? join(ctx.root, 'dist/bin/app-sidecar.js')
}

/** The sidecar bin (see `sidecarBin`), ready when its admin `/readyz` answers 200. */
export async function startSidecarProcess (ctx: BenchContext, options: SidecarStartOptions): Promise<StartedSidecar> {
  const adminPort = await freePort()
  const adminOrigin = `http://127.0.0.1:${adminPort}`
  const name = `${options.name ?? `sidecar-${options.logLevel}`}${options.bin === undefined ? '' : '-before'}`
  const server = await startServer(ctx, name, [...cpuProfArgs(ctx, name), ...(options.nodeArgs ?? []), options.bin ?? sidecarBin(ctx)], {
    ADMIN_PORT: String(adminPort),
    APP_URL: options.appOrigin,
    AUTH_JWKS_URL: options.jwksUrl.href,
    // The JWKS server doubles as the "store", so nothing the sidecar asks the store reaches another local service.
    STORE_URL: options.jwksUrl.origin,
    LOG_LEVEL: options.logLevel,
    RESPONSE_GRACE_PERIOD_SECONDS: '5',
    ...options.env
  }, async child => { await waitForHttp200(child, `${adminOrigin}/readyz`) })
  return { ...server, adminOrigin }
}

/** Why nginx cannot run here, or undefined when it can. */
export function nginxSkipReason (): string | undefined {
  return findNginx() === undefined ? 'nginx is not on the PATH' : undefined
}

/** nginx (one process, upstream keep-alive pool, WebSocket upgrades and streams passed through) in front of `upstreamPort`. */
async function startNginx (ctx: BenchContext, upstreamPort: number): Promise<StartedServer> {
  const nginx = findNginx()
  if (nginx === undefined) throw new Error('nginx is not on the PATH')
  const port = await freePort()
  const prefix = join(ctx.tmpDir, 'nginx')
  const configFile = join(ctx.tmpDir, 'nginx.conf')
  writeFileSync(configFile, nginxConfig({ prefix, port, upstreamPort }))
  return await startServer(ctx, 'nginx', ['-p', prefix, '-c', configFile, '-e', join(prefix, 'error.log')], {},
    async child => { await waitForPort(child, port) }, nginx, port)
}

/** `--cpu-prof` flags for a Node child when BENCH_CPU_PROF=1: a profile per thread in bench/results/profiles/<name>/ when it exits on SIGTERM. */
function cpuProfArgs (ctx: BenchContext, name: string): string[] {
  return ctx.settings.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${join(ctx.root, 'bench/results/profiles', name)}`] : []
}
