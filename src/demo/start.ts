import { loadSidecarConfig, type SidecarConfig } from '../config/sidecar-config.ts'
import { ConfigError } from '../errors.ts'
import { startSidecar } from '../sidecar/sidecar.ts'
import { createTokenIssuer, serveJwks } from './demo-token-issuer.ts'
import { startExampleApp } from './example-app.ts'

/**
 * `npm start`: the demo stack on loopback. An example app, a token signer with its JWKS (standing
 * in for the build store's), and a sidecar in front with auth on; prints a token and commands.
 */
const PROJECT = 'demo'
const APP = 'example'

const app = await startExampleApp(0)
const issuer = await createTokenIssuer()
const jwks = await serveJwks([issuer])
let config: SidecarConfig
try {
  config = loadSidecarConfig({
    PORT: '8000', ADMIN_PORT: '9090', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...process.env,
    APP_URL: `http://127.0.0.1:${app.port}`, AUTH_JWKS_URL: jwks.url.href, PROJECT_ID: PROJECT, APP_NAME: APP
  })
} catch (error) {
  process.stderr.write(`npm start: ${(error as ConfigError).message}\n`)
  process.exit(2)
}
const sidecar = await startSidecar(config)
const token = await issuer.sign(PROJECT, { ttlSeconds: 24 * 3600 })
const base = `http://127.0.0.1:${sidecar.port}`
const ws = `ws://127.0.0.1:${sidecar.port}`
const admin = `http://127.0.0.1:${sidecar.adminPort}`

process.stderr.write(`
app-sidecar demo is running: example app on :${app.port}, sidecar on :${sidecar.port}, admin on :${sidecar.adminPort}

TOKEN=${token}

# call the app's function through the sidecar (the cortex envelope wraps its return value)
curl -s -X POST ${base}/v4/${PROJECT}/${APP}/run -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' -d '{"name":"Ada"}'

# a generator: NDJSON from the app becomes server-sent events, one per token, as each is yielded
curl -N -X POST ${base}/v4/${PROJECT}/${APP}/generate -H "Authorization: Bearer $TOKEN" -d '{"prompt":"streams arrive one token at a time","delay_ms":300}'

# an SSE app: its event stream passes through byte for byte, flushed as it arrives
curl -N "${base}/v4/${PROJECT}/${APP}/events?count=5&delay_ms=500" -H "Authorization: Bearer $TOKEN"

# no token: 401; another app: 404
curl -s -X POST ${base}/v4/${PROJECT}/${APP}/run -d '{}'
curl -s ${base}/v4/${PROJECT}/other/run -H "Authorization: Bearer $TOKEN"

# a WebSocket through the sidecar (echo)
node -e "const W=require('ws');const s=new W('${ws}/v4/${PROJECT}/${APP}/ws',{headers:{authorization:'Bearer '+process.env.TOKEN}});s.on('open',()=>s.send('hello'));s.on('message',m=>{console.log(String(m));s.close()})"

# probes and metrics
curl -s ${admin}/readyz; curl -s ${admin}/metrics | grep ^sidecar_

Ctrl-C drains and stops.
`)

let stopping = false
async function stop (): Promise<void> {
  if (stopping) return
  stopping = true
  await sidecar.drain(config.responseGracePeriodSeconds)
  await Promise.all([app.close(), jwks.close()])
  sidecar.logger.flush(() => { process.exit(0) })
}
process.once('SIGINT', () => { void stop() })
process.once('SIGTERM', () => { void stop() })
