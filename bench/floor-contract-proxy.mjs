import { randomUUID } from 'node:crypto'
import http from 'node:http'
import { createRemoteJWKSet, jwtVerify } from 'jose'
import { LRUCache } from 'lru-cache'
import { pino } from 'pino'
import { Pool } from 'undici'

/**
 * The contract's floor (issue 40): the Node floor (bench/floor-proxy.mjs) plus only what the
 * contract makes every plain `/v4` call do, each done the cheapest way this file knows, and
 * nothing else: the route's project checked and its prefix cut; the bearer token verified
 * (jose, the JWKS) and its claims cached by token (lru-cache); a run id taken from
 * `X-Request-Id` or made, sent to the app and echoed; the app's 2xx JSON body wrapped in the
 * cortex envelope with its Content-Length; one access line per request (pino's bytes, built by
 * hand, to pino's batched stdout stream); a requests count by status and a duration histogram
 * (plain arrays, as a scrape would read them). What the sidecar does
 * beyond it (gate, deadlines, drain count, calls by run id, Server-Timing, CORS, priority, its
 * layers) is what the sidecar ÷ contract-floor ratio measures; what this file costs over the
 * floor is the contract's own price.
 * `PORT=… TARGET_URL=http://127.0.0.1:… JWKS_URL=… PROJECT_ID=… APP_NAME=… node bench/floor-contract-proxy.mjs`;
 * `FLOOR_CONTRACT_SKIP=log,metrics,envelope,token` leaves those parts out, to price each.
 */
const port = Number(process.env.PORT ?? 8081)
const host = process.env.HOST ?? '127.0.0.1'
const target = process.env.TARGET_URL ?? 'http://127.0.0.1:8192'
const prefix = `/v4/${process.env.PROJECT_ID ?? 'bench'}/${process.env.APP_NAME ?? 'app'}/`
const jwks = createRemoteJWKSet(new URL(process.env.JWKS_URL ?? 'http://127.0.0.1:1/jwks.json'))
const verified = new LRUCache({ max: 10_000 })
const stdout = pino.destination({ dest: 1, sync: false, minLength: 2048, maxWrite: 4096 })
const BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
const buckets = new Float64Array(BOUNDS.length + 1)
const requests = new Float64Array(600)
let durationSum = 0

const skip = new Set((process.env.FLOOR_CONTRACT_SKIP ?? '').split(',').map(part => part.trim()))

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'authorization'])

function endToEnd (headers) {
  const out = {}
  for (const name in headers) if (!HOP_BY_HOP.has(name)) out[name] = headers[name]
  return out
}

function answer (res, status, message, runId) {
  const body = JSON.stringify({ message })
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), 'x-request-id': runId })
  res.end(body)
}

/** The token's cached claims, while they have not expired. */
function cachedClaims (token) {
  const cached = verified.get(token)
  return cached !== undefined && cached.exp * 1000 > Date.now() ? cached : undefined
}

/** The token verified against the key set, its claims cached. */
async function verify (token) {
  const { payload } = await jwtVerify(token, jwks)
  verified.set(token, payload)
}

/** Relays the app's answer: a 2xx body in the cortex envelope, any other as it came. */
class Relay {
  #res
  #runId
  #controller
  #status = 0
  #headers
  #chunks = []
  #startedAt = performance.now()

  constructor (res, runId) {
    this.#res = res
    this.#runId = runId
    res.once('close', () => { if (!res.writableFinished) this.#controller?.abort(new Error('caller gone')) })
  }

  onRequestStart (controller) { this.#controller = controller }

  onResponseStart (_controller, status, headers) {
    this.#status = skip.has('envelope') ? 0 : status
    this.#headers = endToEnd(headers)
    this.#headers['x-request-id'] = this.#runId
    if (this.#status < 200 || this.#status >= 300) this.#res.writeHead(status, this.#headers)
  }

  onResponseData (controller, chunk) {
    if (this.#status >= 200 && this.#status < 300) {
      this.#chunks.push(chunk)
      return
    }
    if (!this.#res.write(chunk)) {
      controller.pause()
      this.#res.once('drain', () => { controller.resume() })
    }
  }

  onResponseEnd () {
    if (this.#status < 200 || this.#status >= 300) {
      this.#res.end()
      return
    }
    const body = Buffer.concat(this.#chunks).toString()
    const text = `{"run_id":${JSON.stringify(this.#runId)},"result":${body},"run_time_ms":${Math.round((performance.now() - this.#startedAt) * 10) / 10},"timestamp":"${new Date().toISOString()}"}`
    const headers = this.#headers
    delete headers['content-length']
    headers['content-type'] = 'application/json; charset=utf-8'
    headers['content-length'] = Buffer.byteLength(text)
    this.#res.writeHead(this.#status, headers)
    this.#res.end(text)
  }

  onResponseError () {
    if (this.#res.headersSent) this.#res.destroy()
    else answer(this.#res, 502, 'app unreachable', this.#runId)
  }
}

const pool = new Pool(target, { keepAliveTimeout: 30_000 })
const server = http.createServer((req, res) => {
  const startedAt = performance.now()
  const runId = req.headers['x-request-id'] ?? randomUUID()
  res.once('close', () => {
    const seconds = (performance.now() - startedAt) / 1000
    if (!skip.has('metrics')) {
      requests[res.statusCode]++
      let i = 0
      while (i < BOUNDS.length && seconds > BOUNDS[i]) i++
      buckets[i]++
      durationSum += seconds
    }
    if (skip.has('log')) return
    const queryAt = req.url.indexOf('?')
    const path = queryAt === -1 ? req.url : req.url.slice(0, queryAt)
    stdout.write(`{"level":30,"time":${Date.now()},"method":${JSON.stringify(req.method)},"path":${JSON.stringify(path)},"status":${res.statusCode},"duration":${Math.round(seconds * 1e6) / 1e3},"runId":${JSON.stringify(runId)},"msg":"request"}\n`)
  })
  if (!req.url.startsWith(prefix)) return answer(res, 404, 'no such app', runId)
  const authorization = req.headers.authorization
  if (authorization === undefined || !authorization.startsWith('Bearer ')) return answer(res, 401, 'no token', runId)
  const token = authorization.slice(7)
  const forward = () => {
    const headers = endToEnd(req.headers)
    headers['x-request-id'] = runId
    const bodyless = req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined
    pool.dispatch({ method: req.method, path: req.url.slice(prefix.length - 1), headers, body: bodyless ? null : req }, new Relay(res, runId))
  }
  if (skip.has('token') || cachedClaims(token) !== undefined) forward()
  else verify(token).then(forward, () => { answer(res, 403, 'bad token', runId) })
})
server.listen({ port, host, backlog: 4096 }, () => { process.stdout.write(`contract floor proxy on ${host}:${port} → ${target}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  server.close()
  stdout.flushSync()
  void pool.destroy()
})
