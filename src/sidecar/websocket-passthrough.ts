import { type IncomingMessage, STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { performance } from 'node:perf_hooks'
import httpProxy from 'http-proxy'
import type { Logger } from 'pino'
import { readBearerToken } from '../auth/bearer-token.ts'
import type { TokenVerifier } from '../auth/token-verifier.ts'
import type { SidecarConfig } from '../config/sidecar-config.ts'
import { AppUnreachableError, RouteNotFoundError, SidecarError } from '../errors.ts'
import type { ConcurrencyGate, Release } from '../lifecycle/concurrency-gate.ts'
import type { InflightTracker } from '../lifecycle/inflight-tracker.ts'
import { describeNetworkError } from './network-error.ts'
import { appRequestHeaders, headerListToObject } from './forward-headers.ts'
import { parseInvokeRoute, splitQuery } from './invoke-route.ts'
import type { SidecarMetrics } from './metrics.ts'
import { runIdFor } from './run-id.ts'

export interface WebSocketDeps {
  readonly config: SidecarConfig
  readonly verifier: TokenVerifier | undefined
  readonly logger: Logger
  readonly metrics: SidecarMetrics
  readonly inflight: InflightTracker
  /** WebSockets hold a concurrency slot until they close (no deadline applies to them). */
  readonly gate: ConcurrencyGate
}

/** One upgrade as it is proxied: what its log line and metrics need. */
interface UpgradeState {
  readonly runId: string
  readonly method: string
  /** The caller's path, without the query string. */
  readonly path: string
  readonly startedAt: number
  status: number
  upgraded: boolean
  /** Frees the upgrade's concurrency slot once it has one. */
  release: Release | undefined
}

export interface WebSocketPassthrough {
  handleUpgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void
  /** Ends every open WebSocket (the drain's grace period is over). */
  closeAll: () => void
}

/**
 * WebSocket upgrades on `/v4/…`: route and auth like an HTTP call, then the handshake and every
 * frame pass to and from the app untouched (http-proxy's `ws` pass pipes the raw sockets).
 */
export function createWebSocketPassthrough (deps: WebSocketDeps): WebSocketPassthrough {
  const { config } = deps
  const basePath = config.appUrl.pathname.replace(/\/$/, '')
  const states = new WeakMap<IncomingMessage, UpgradeState>()
  const open = new Set<Duplex>()
  const proxy = httpProxy.createProxyServer({ target: config.appUrl.origin, ws: true, xfwd: false, changeOrigin: true })

  proxy.on('proxyReqWs', (proxyReq, req, socket) => {
    const state = states.get(req) as UpgradeState
    // The caller went away before the app answered: abandon the handshake to the app.
    socket.once('close', () => { if (!state.upgraded) proxyReq.destroy() })
    proxyReq.on('response', response => {
      state.status = response.statusCode ?? 502
      // a refusal is the whole answer: http-proxy pipes it and ends the socket's write side, but
      // bytes the caller sent after its headers stay unread, so 'close' would never come
      response.once('end', () => { state.release?.() })
      closeOnceAnswered(socket)
    })
    proxyReq.on('upgrade', (response, proxySocket) => {
      // runs before http-proxy writes the 101 from these headers
      response.headers['x-request-id'] = state.runId
      if (socket.destroyed) {
        proxySocket.destroy()
        return
      }
      state.status = 101
      state.upgraded = true
      open.add(socket)
      deps.metrics.websocketConnections.inc()
      socket.once('close', () => {
        open.delete(socket)
        deps.metrics.websocketConnections.dec()
      })
    })
  })
  proxy.on('error', (error, req, socket) => {
    const state = states.get(req)
    if (state === undefined || state.upgraded || !('write' in socket) || socket.destroyed) {
      socket.destroy()
      return
    }
    state.status = 502
    rejectUpgrade(socket as Duplex, state.runId, new AppUnreachableError(describeNetworkError(error)))
  })

  function finish (state: UpgradeState): void {
    deps.inflight.end()
    const seconds = (performance.now() - state.startedAt) / 1000
    // 0: the caller left before any answer (499, as for HTTP calls)
    if (state.status === 0) state.status = 499
    deps.metrics.recordRequest('websocket', state.status, seconds)
    deps.logger.info({
      method: state.method,
      path: state.path,
      status: state.status,
      duration: Math.round(seconds * 1e6) / 1e3,
      runId: state.runId
    }, 'websocket')
  }

  async function handleUpgrade (req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', ignoreSocketError)
    const callerUrl = req.url as string
    const state: UpgradeState = {
      runId: runIdFor(req.headers['x-request-id']),
      method: req.method as string,
      path: callerUrl.split('?', 1)[0] as string,
      startedAt: performance.now(),
      status: 0,
      upgraded: false,
      release: undefined
    }
    states.set(req, state)
    deps.inflight.begin()
    socket.once('close', () => { finish(state) })
    const caller = watchCaller(socket)
    try {
      const route = parseInvokeRoute(callerUrl)
      if (route === undefined ||
          (config.projectId !== undefined && route.projectId !== config.projectId) ||
          (config.appName !== undefined && route.appName !== config.appName)) {
        throw new RouteNotFoundError('no such app')
      }
      const query = splitQuery(route.query, config.allowQueryToken)
      if (deps.verifier !== undefined) {
        await deps.verifier.authorize(readBearerToken(req.headers, query.accessToken), route.projectId)
      }
      if (socket.destroyed) return
      req.headers = headerListToObject(appRequestHeaders(req, state.runId, {
        dropAuthorization: deps.verifier !== undefined, dropAcceptEncoding: false, upgrade: true
      }))
      req.url = basePath + route.appPath + (query.forwarded === '' ? '' : '?' + query.forwarded)
      const release = deps.gate.tryAcquire() ?? await deps.gate.acquire(caller.gone)
      state.release = release
      socket.once('close', release)
      const early = caller.stop()
      if (socket.destroyed) return
      proxy.ws(req, socket, early.length === 0 ? head : Buffer.concat([head, ...early]))
    } catch (error) {
      caller.stop()
      if (socket.destroyed) return // the caller left while waiting for a slot
      state.status = error instanceof SidecarError ? error.status : 500
      rejectUpgrade(socket, state.runId, error)
    }
  }

  return {
    handleUpgrade: (req, socket, head) => { void handleUpgrade(req, socket, head) },
    closeAll: () => { for (const socket of open) socket.destroy() }
  }
}

function ignoreSocketError (): void {}

/** How long a refused upgrade's answer may take to reach a caller that does not read it. */
const REFUSAL_FLUSH_MS = 10_000

/**
 * A refused upgrade's socket closes once its answer is written: ending the write side alone
 * leaves it open while unread bytes from the caller sit in it, holding the drain (and a slot).
 */
function closeOnceAnswered (socket: Duplex): void {
  socket.once('finish', () => { socket.destroy() })
  if ('setTimeout' in socket) (socket as Socket).setTimeout(REFUSAL_FLUSH_MS, () => { socket.destroy() })
}

/** Most bytes a caller may send before its upgrade is answered; beyond it the connection is cut. */
const EARLY_BYTES_LIMIT = 64 * 1024

/**
 * Reads the caller's socket while its upgrade is checked and waits for a slot: Node pauses an
 * upgrade's socket, so a caller's FIN (or reset) would go unseen until a slot freed. Bytes sent
 * meanwhile are kept for the app (after the handshake); `gone` aborts when the caller leaves.
 */
function watchCaller (socket: Duplex): { gone: AbortSignal, stop: () => Buffer[] } {
  const leaving = new AbortController()
  const early: Buffer[] = []
  let bytes = 0
  const onData = (chunk: Buffer): void => {
    bytes += chunk.length
    if (bytes > EARLY_BYTES_LIMIT) socket.destroy()
    else early.push(chunk)
  }
  const onGone = (): void => {
    leaving.abort(new Error('caller disconnected'))
    socket.destroy()
  }
  socket.on('data', onData)
  socket.once('end', onGone)
  socket.once('close', onGone)
  return {
    gone: leaving.signal,
    stop: () => {
      socket.pause()
      socket.off('data', onData)
      socket.off('end', onGone)
      socket.off('close', onGone)
      return early
    }
  }
}

/** Answers a refused upgrade with the sidecar's JSON error and closes the socket. */
export function rejectUpgrade (socket: Duplex, runId: string, error: unknown): void {
  const known = error instanceof SidecarError ? error : new SidecarError(500, 'SIDECAR_INTERNAL', 'internal error')
  const body = known.body()
  const extra = known.headers === undefined ? '' : Object.entries(known.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')
  closeOnceAnswered(socket)
  socket.end(`HTTP/1.1 ${known.status} ${STATUS_CODES[known.status] ?? ''}\r\n` +
    'content-type: application/json; charset=utf-8\r\n' +
    `content-length: ${Buffer.byteLength(body)}\r\n` +
    `x-request-id: ${runId}\r\n${extra}connection: close\r\n\r\n${body}`)
}
