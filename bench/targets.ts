import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { createTokenIssuer, type JwksServer, serveJwks } from '../src/demo/demo-token-issuer.ts'
import {
  type BenchChild, freePort, spawnChild, waitForHttp200, waitForPort
} from './child-processes.ts'
import { findNginx, nginxConfig } from './nginx-config.ts'
import type { LoadRequest } from './load.ts'
import type { BenchContext, RunningTarget } from './scenario.ts'

/**
 * Starting the servers under test, each as its own process, each waited for until it is ready.
 * Shared by the scenarios: a scenario decides which of them to start and how to call them.
 */
export interface StartedServer {
  readonly child: BenchChild
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly origin: string
}

/**
 * A target that is one server of its own in front of what the scenario shares (the bare proxy,
 * nginx): started by `start`, called with `request(origin)`, its process stopped with it.
 */
export function serverTarget (start: () => Promise<StartedServer>, request: (origin: string) => LoadRequest,
  checkResponse: RunningTarget['checkResponse']): () => Promise<RunningTarget> {
  return async () => {
    const server = await start()
    return { request: request(server.origin), checkResponse, children: [server.child], stop: async () => { await server.child.stop() } }
  }
}

/** Checks the example app's answer to json-post's `POST /run {"name":"Ada"}` through a cortex sidecar (the envelope). */
export const expectGreeting = (status: number, body: string): void => {
  if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
  const parsed = JSON.parse(body) as { result?: { greeting?: unknown } }
  if (parsed.result?.greeting !== 'Hello, Ada!') throw new Error(`unexpected body: ${body.slice(0, 200)}`)
}

/** The example app (`dist/demo/example-app.js`): POST /run {"name"} → {"greeting"}. */
export async function startExampleApp (ctx: BenchContext): Promise<StartedServer> {
  const port = await freePort()
  const child = spawnChild({
    name: 'example-app',
    command: process.execPath,
    args: [join(ctx.root, 'dist/demo/example-app.js')],
    env: { PORT: String(port), HOST: '127.0.0.1' },
    cwd: ctx.root,
    logDir: ctx.tmpDir
  })
  await startedOrStopped(child, async () => { await waitForHttp200(child, `http://127.0.0.1:${port}/health`) })
  return { child, port, origin: `http://127.0.0.1:${port}` }
}

/**
 * A bench-only server of bench/servers.ts (`script`: its name, `.ts` optional: `stream-app`,
 * `webhook-receiver`, …), run with tsx as its own process, ready when `GET readyPath` answers 200.
 */
export async function startBenchServer (ctx: BenchContext, name: string, script: string, env: NodeJS.ProcessEnv = {},
  readyPath = '/health'): Promise<StartedServer> {
  const port = await freePort()
  const child = spawnChild({
    name,
    command: process.execPath,
    args: ['--import', 'tsx', join(ctx.root, 'bench/servers.ts'), script.replace(/\.ts$/, '')],
    env: { PORT: String(port), HOST: '127.0.0.1', ...env },
    cwd: ctx.root,
    logDir: ctx.tmpDir
  })
  await startedOrStopped(child, async () => { await waitForHttp200(child, `http://127.0.0.1:${port}${readyPath}`) })
  return { child, port, origin: `http://127.0.0.1:${port}` }
}

/**
 * The build store bin (`dist/bin/build-store.js`): embedded PostgreSQL in `dataDir`, or
 * `databaseUrl`; ready when `/healthz` answers 200 (the embedded database takes a while to start).
 */
export async function startBuildStoreProcess (ctx: BenchContext, options: { name: string, adminToken: string, dataDir?: string, databaseUrl?: string }): Promise<StartedServer> {
  const port = await freePort()
  const child = spawnChild({
    name: options.name,
    command: process.execPath,
    args: [...cpuProfArgs(ctx, options.name), join(ctx.root, 'dist/bin/build-store.js')],
    env: {
      PORT: String(port),
      HOST: '127.0.0.1',
      ADMIN_TOKEN: options.adminToken,
      LOG_LEVEL: 'warn',
      // undefined drops a variable the bench itself may have (spawn skips undefined values)
      DATA_DIR: options.dataDir,
      DATABASE_URL: options.databaseUrl
    },
    cwd: ctx.root,
    logDir: ctx.tmpDir
  })
  await startedOrStopped(child, async () => { await waitForHttp200(child, `http://127.0.0.1:${port}/healthz`, 120_000) })
  return { child, port, origin: `http://127.0.0.1:${port}` }
}

/**
 * The key set sidecars under test verify tokens against (`jwks.url`), and a bearer token for
 * `projectId` signed with it, valid for a day (auth on, the token cached after the first call).
 */
export async function benchAuth (projectId: string): Promise<{ jwks: JwksServer, token: string }> {
  const issuer = await createTokenIssuer()
  const jwks = await serveJwks([issuer])
  return { jwks, token: await issuer.sign(projectId, { ttlSeconds: 24 * 3600 }) }
}

/** bench/bare-http-proxy.mjs: http-proxy with a keep-alive agent, nothing else. */
export async function startBareProxy (ctx: BenchContext, appOrigin: string): Promise<StartedServer> {
  return await startProxyScript(ctx, 'bare-http-proxy', appOrigin)
}

/** bench/floor-proxy.mjs: the Node floor, undici's Pool.dispatch and nothing else (issue 17). */
export async function startFloorProxy (ctx: BenchContext, appOrigin: string): Promise<StartedServer> {
  return await startProxyScript(ctx, 'floor-proxy', appOrigin)
}

/** A bench proxy (`bench/<name>.mjs`, plain JavaScript on bare Node, its own process) in front of `appOrigin`, ready when its port accepts. */
async function startProxyScript (ctx: BenchContext, name: 'bare-http-proxy' | 'floor-proxy', appOrigin: string): Promise<StartedServer> {
  const port = await freePort()
  const child = spawnChild({
    name,
    command: process.execPath,
    args: [...cpuProfArgs(ctx, name), join(ctx.root, `bench/${name}.mjs`)],
    env: { PORT: String(port), HOST: '127.0.0.1', TARGET_URL: appOrigin },
    cwd: ctx.root,
    logDir: ctx.tmpDir
  })
  await startedOrStopped(child, async () => { await waitForPort(child, port) })
  return { child, port, origin: `http://127.0.0.1:${port}` }
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
  /** Flags for node itself, before the script (V8 flags that NODE_OPTIONS does not allow, e.g. --optimize-for-size). */
  nodeArgs?: string[]
  /** Another build's bin (a before/after pair in one run; the child's name gets `-before`); default: see sidecarBin. */
  bin?: string
}

/**
 * The sidecar bin the bench starts: `BENCH_SIDECAR_BIN` when set (another build, e.g. an older
 * checkout's `dist/bin/app-sidecar.js`, for a before/after run), else this checkout's.
 */
export function sidecarBin (ctx: BenchContext): string {
  return process.env.BENCH_SIDECAR_BIN?.trim() || join(ctx.root, 'dist/bin/app-sidecar.js')
}

/** The sidecar bin (see `sidecarBin`), ready when its admin `/readyz` answers 200. */
export async function startSidecarProcess (ctx: BenchContext, options: SidecarStartOptions): Promise<StartedServer & { adminOrigin: string }> {
  const port = await freePort()
  const adminPort = await freePort()
  const name = `${options.name ?? `sidecar-${options.logLevel}`}${options.bin === undefined ? '' : '-before'}`
  const child = spawnChild({
    name,
    command: process.execPath,
    args: [...cpuProfArgs(ctx, name), ...(options.nodeArgs ?? []), options.bin ?? sidecarBin(ctx)],
    env: {
      PORT: String(port),
      ADMIN_PORT: String(adminPort),
      HOST: '127.0.0.1',
      APP_URL: options.appOrigin,
      AUTH_JWKS_URL: options.jwksUrl.href,
      // The JWKS server doubles as the "store", so nothing the sidecar asks the store reaches another local service.
      STORE_URL: options.jwksUrl.origin,
      LOG_LEVEL: options.logLevel,
      RESPONSE_GRACE_PERIOD_SECONDS: '5',
      ...options.env
    },
    cwd: ctx.root,
    logDir: ctx.tmpDir
  })
  const adminOrigin = `http://127.0.0.1:${adminPort}`
  await startedOrStopped(child, async () => { await waitForHttp200(child, `${adminOrigin}/readyz`) })
  return { child, port, origin: `http://127.0.0.1:${port}`, adminOrigin }
}

/** Why nginx cannot run here, or undefined when it can. */
export function nginxSkipReason (): string | undefined {
  return findNginx() === undefined ? 'nginx is not on the PATH' : undefined
}

/**
 * nginx (one process, upstream keep-alive pool, WebSocket upgrades and streams passed through) in
 * front of the server on `upstreamPort`, with a generated config in the temp dir.
 */
export async function startNginx (ctx: BenchContext, upstreamPort: number): Promise<StartedServer> {
  const nginx = findNginx()
  if (nginx === undefined) throw new Error('nginx is not on the PATH')
  const port = await freePort()
  const prefix = join(ctx.tmpDir, 'nginx')
  const config = nginxConfig({ prefix, port, upstreamPort })
  const configFile = join(ctx.tmpDir, 'nginx.conf')
  writeFileSync(configFile, config)
  const child = spawnChild({
    name: 'nginx',
    command: nginx,
    args: ['-p', prefix, '-c', configFile, '-e', join(prefix, 'error.log')],
    cwd: ctx.tmpDir,
    logDir: ctx.tmpDir
  })
  await startedOrStopped(child, async () => { await waitForPort(child, port) })
  return { child, port, origin: `http://127.0.0.1:${port}` }
}

/** Where BENCH_CPU_PROF=1 puts the Node targets' CPU profiles (open them in Chrome DevTools). */
export const PROFILE_DIR = 'bench/results/profiles'

/**
 * `--cpu-prof` flags for a Node child when BENCH_CPU_PROF=1: profiles land in
 * bench/results/profiles/<name>/ when it exits on SIGTERM, one per thread (tsx adds a loader thread).
 */
function cpuProfArgs (ctx: BenchContext, name: string): string[] {
  if (!ctx.settings.cpuProf) return []
  return ['--cpu-prof', `--cpu-prof-dir=${join(ctx.root, PROFILE_DIR, name)}`]
}

/** Runs `ready`; when it throws, stops the child before rethrowing. */
async function startedOrStopped (child: BenchChild, ready: () => Promise<void>): Promise<void> {
  try {
    await ready()
  } catch (error) {
    await child.stop(2000)
    throw error
  }
}
