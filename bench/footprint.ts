// The sidecar's start time and idle memory, as issue 40 reads them from the built bin: the time
// from spawn to the first /livez 200, and the RSS at rest (1 s after that) and after one call
// (2 s after it), the sidecar configured as the json-post bench runs it (token auth, info log).
// Read against bare Node (an HTTP server answering "{}") and the floor proxy, and against an
// older build (BENCH_BEFORE_BIN), in interleaved rounds; medians printed as one JSON line each.
// `npm run build && node --import tsx bench/footprint.ts`   (BENCH_ROUNDS=7, BENCH_BEFORE_BIN=…)
import { spawn } from 'node:child_process'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { createTokenIssuer, serveJwks } from '../test/helpers/demo-token-issuer.ts'
import { freePort } from '../test/helpers/ports.ts'
import { median } from './aggregate.ts'
import { rssMb } from './process-memory.ts'

const ROOT = fileURLToPath(new URL('../', import.meta.url))
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7)
const BARE_NODE = "require('node:http').createServer((q, s) => { q.resume(); q.on('end', () => s.end('{}')) }).listen(+process.env.PORT, '127.0.0.1')"

interface Target {
  name: string
  args: string[]
  env: (port: number, admin: number) => NodeJS.ProcessEnv
  /** The URL polled for the first 200, and the call made once. */
  ready: (port: number, admin: number) => string
  call: (port: number) => string
}

const issuer = await createTokenIssuer()
const jwks = await serveJwks([issuer])
const token = await issuer.sign('bench')
const appPort = await freePort()
const app = spawn(process.execPath, ['dist/demo/example-app.js'], { cwd: ROOT, env: { PATH: process.env.PATH, PORT: String(appPort) }, stdio: 'ignore' })
await waitFor200(`http://127.0.0.1:${appPort}/health`, 10_000)
const appUrl = `http://127.0.0.1:${appPort}`

const sidecar = (name: string, bin: string): Target => ({
  name,
  args: [bin],
  env: (port, admin) => ({
    PORT: String(port), ADMIN_PORT: String(admin), HOST: '127.0.0.1', APP_URL: appUrl, AUTH_JWKS_URL: jwks.url.href,
    STORE_URL: jwks.url.origin, LOG_LEVEL: 'info', PROJECT_ID: 'bench', APP_NAME: 'app'
  }),
  ready: (_port, admin) => `http://127.0.0.1:${admin}/livez`,
  call: port => `http://127.0.0.1:${port}/v4/bench/app/run`
})
const targets: Target[] = [
  sidecar('sidecar', 'dist/bin/app-sidecar.js'),
  ...process.env.BENCH_BEFORE_BIN === undefined ? [] : [sidecar('sidecar-before', process.env.BENCH_BEFORE_BIN)],
  {
    name: 'floor', args: ['bench/floor-proxy.mjs'], env: port => ({ PORT: String(port), TARGET_URL: appUrl }),
    ready: port => `http://127.0.0.1:${port}/health`, call: port => `http://127.0.0.1:${port}/run`
  },
  { name: 'bare-node', args: ['-e', BARE_NODE], env: port => ({ PORT: String(port) }), ready: port => `http://127.0.0.1:${port}/`, call: port => `http://127.0.0.1:${port}/run` }
]

/** Polls `url` every 2 ms until it answers 200 (child-processes.ts' waitForHttp200 polls every 50 ms: too coarse for a start time). */
async function waitFor200 (url: string, ms: number): Promise<void> {
  const deadline = performance.now() + ms
  for (;;) {
    try {
      const response = await fetch(url)
      await response.arrayBuffer()
      if (response.status === 200) return
    } catch {}
    if (performance.now() > deadline) throw new Error(`${url}: no 200 within ${ms} ms`)
    await sleep(2)
  }
}

/** RSS in MB (10⁶ bytes), as the bench reports it; undefined if the process is gone. */
interface Sample { startMs: number, restMb: number | undefined, oneCallMb: number | undefined }
async function measure (target: Target): Promise<Sample> {
  const [port, admin] = [await freePort(), await freePort()]
  const started = performance.now()
  const child = spawn(process.execPath, target.args, { cwd: ROOT, env: { PATH: process.env.PATH, ...target.env(port, admin) }, stdio: 'ignore' })
  try {
    await waitFor200(target.ready(port, admin), 15_000)
    const startMs = performance.now() - started
    await sleep(1000)
    const restMb = rssMb(child.pid as number)
    const response = await fetch(target.call(port), {
      method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: '{"name":"Ada"}'
    })
    await response.arrayBuffer()
    if (response.status !== 200) throw new Error(`${target.name}: the call answered ${response.status}`)
    await sleep(2000)
    return { startMs, restMb, oneCallMb: rssMb(child.pid as number) }
  } finally {
    child.kill('SIGKILL')
  }
}

const samples = new Map<string, Sample[]>(targets.map(t => [t.name, []]))
for (let round = 0; round < ROUNDS; round++) {
  for (const target of targets) samples.get(target.name)?.push(await measure(target))
}
for (const [name, list] of samples) {
  console.log(JSON.stringify({
    target: name,
    startMs: Math.round(median(list.map(s => s.startMs))),
    restRssMb: Number(median(list.map(s => s.restMb)).toFixed(1)),
    oneCallRssMb: Number(median(list.map(s => s.oneCallMb)).toFixed(1)),
    startMsEach: list.map(s => Math.round(s.startMs))
  }))
}
app.kill('SIGKILL')
await jwks.close()
