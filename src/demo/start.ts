import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { applyBuildSettings } from '../config/build-settings.ts'
import { loadSidecarConfig, type SidecarConfig } from '../config/sidecar-config.ts'
import type { ConfigError } from '../errors.ts'
import { type RunningSidecar, startSidecar } from '../sidecar/sidecar.ts'
import { loadStoreConfig, startBuildStore } from '../build-store/index.ts'
import { startExampleApp } from './example-app.ts'

/**
 * `npm start`: the whole stack on loopback. An embedded build store (in a fresh temporary
 * DATA_DIR unless one is given), the example app, a build describing it, a service account, and
 * a sidecar that reads its settings from that build, with auth on. Prints a token and commands.
 */
const PROJECT = 'demo'
const APP = 'example'
const BUILD = 'b1'

const ownDataDir = process.env.DATA_DIR === undefined || process.env.DATA_DIR === ''
const dataDir = ownDataDir ? mkdtempSync(join(tmpdir(), 'app-sidecar-demo-')) : process.env.DATA_DIR as string
// the temporary store goes on every exit path: a clean stop, a failed start, an uncaught error
if (ownDataDir) process.once('exit', () => { rmSync(dataDir, { recursive: true, force: true }) })

/** A start-up failure: one line, exit 1 (the exit handler removes the temporary store). */
function fail (message: string, code = 1): never {
  process.stderr.write(`npm start: ${message}\n`)
  process.exit(code)
}

const adminToken = process.env.ADMIN_TOKEN ?? randomBytes(24).toString('hex')
const store = await startBuildStore(loadStoreConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ADMIN_TOKEN: adminToken, LOG_LEVEL: 'warn' }))
  .catch((error: Error) => fail(`cannot start the build store: ${error.message}`))
const app = await startExampleApp(0)
await store.builds.put({ projectId: PROJECT, appId: APP, buildId: BUILD }, {
  name: APP, status: 'success', type: 'deploy', runtime: 'cortex', port: app.port,
  healthcheckEndpoint: '/health', readycheckEndpoint: '/health', replicaConcurrency: 8, responseGracePeriodSeconds: 30,
  hardware: 'CPU', cpu: 1, memory: 2, minReplicaCount: 0, maxReplicaCount: 3, buildTimeMs: '4200', disableAuth: false
})
const { token } = await store.serviceAccounts.create(PROJECT, 'demo', new Date(Date.now() + 24 * 3600 * 1000))

let config: SidecarConfig
try {
  // PORT=0 asks for free ports: the admin port too, unless it is given
  const adminPort = process.env.PORT === '0' ? '0' : '9090'
  const env = {
    PORT: '8000', ADMIN_PORT: adminPort, HOST: '127.0.0.1', LOG_LEVEL: 'info', ...process.env,
    STORE_URL: store.url, BUILD_ID: BUILD, PROJECT_ID: PROJECT, APP_ID: APP, STORE_TOKEN: token
  }
  config = await applyBuildSettings(loadSidecarConfig(env), env)
} catch (error) {
  fail((error as ConfigError).message, 2)
}
const sidecar: RunningSidecar = await startSidecar(config).catch((error: NodeJS.ErrnoException) => {
  const port = error.code === 'EADDRINUSE' ? ` (port ${String((error as { port?: number }).port)} is taken: set PORT and ADMIN_PORT, or PORT=0 for free ones)` : ''
  return fail(`cannot start the sidecar: ${error.code ?? error.message}${port}`)
})
const base = `http://127.0.0.1:${sidecar.port}`
const ws = `ws://127.0.0.1:${sidecar.port}`
const admin = `http://127.0.0.1:${sidecar.adminPort}`
// an absolute path, so the WebSocket example runs from any folder
const wsModule = createRequire(import.meta.url).resolve('ws')

process.stderr.write(`
app-sidecar demo is running on loopback:
  build store ${store.url} (embedded PostgreSQL in ${dataDir})
  example app http://127.0.0.1:${app.port}
  sidecar     ${base} (admin ${admin}), configured from build ${PROJECT}/${APP}/${BUILD}

export TOKEN=${token}
export ADMIN_TOKEN=${adminToken}

# call the app's function through the sidecar (the cortex envelope wraps its return value)
curl -s -X POST ${base}/v4/${PROJECT}/${APP}/run -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"name":"Ada"}'

# a generator: NDJSON from the app becomes server-sent events, one per token, as each is yielded
curl -N -X POST ${base}/v4/${PROJECT}/${APP}/generate -H "Authorization: Bearer $TOKEN" -d '{"prompt":"streams arrive one token at a time","delay_ms":300}'

# an SSE app: its event stream passes through byte for byte, flushed as it arrives
curl -N "${base}/v4/${PROJECT}/${APP}/events?count=5&delay_ms=500" -H "Authorization: Bearer $TOKEN"

# an async run: 202 at once with its id; follow its events (resumable), then read its record
RUN=$(curl -s -X POST "${base}/v4/${PROJECT}/${APP}/generate?async=true" -H "Authorization: Bearer $TOKEN" -d '{"prompt":"runs outlive their connection","delay_ms":300}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).run_id')
curl -N ${base}/v4/${PROJECT}/${APP}/_runs/$RUN/events -H "Authorization: Bearer $TOKEN"
curl -s ${base}/v4/${PROJECT}/${APP}/_runs/$RUN -H "Authorization: Bearer $TOKEN"

# Get Build, through the sidecar (/v2 is forwarded to the store)
curl -s ${base}/v2/projects/${PROJECT}/apps/${APP}/builds/${BUILD} -H "Authorization: Bearer $TOKEN"

# no token: 401; another app: 404
curl -s -X POST ${base}/v4/${PROJECT}/${APP}/run -d '{}'
curl -s ${base}/v4/${PROJECT}/other/run -H "Authorization: Bearer $TOKEN"

# a WebSocket through the sidecar (echo)
node -e "const W=require('${wsModule}');const s=new W('${ws}/v4/${PROJECT}/${APP}/ws',{headers:{authorization:'Bearer '+process.env.TOKEN}});s.on('open',()=>s.send('hello'));s.on('message',m=>{console.log(String(m));s.close()})"

# the store's admin side: service accounts (the CLI speaks to the store over HTTP)
STORE_URL=${store.url} ADMIN_TOKEN=$ADMIN_TOKEN npx build-store list-service-accounts --project ${PROJECT}

# probes and metrics
curl -s ${admin}/readyz; curl -s ${admin}/metrics | grep ^sidecar_

Ctrl-C drains and stops.
`)

let stopping = false
async function stop (): Promise<void> {
  if (stopping) return
  stopping = true
  await sidecar.drain(config.responseGracePeriodSeconds)
  await Promise.all([app.close(), store.close()])
  sidecar.logger.flush(() => { process.exit(0) })
}
process.once('SIGINT', () => { void stop() })
process.once('SIGTERM', () => { void stop() })
