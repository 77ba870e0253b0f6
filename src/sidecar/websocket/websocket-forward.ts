import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import type HttpProxy from 'http-proxy'
import type { SidecarConfig } from '../../config/sidecar-config.ts'
import { pathPrefix } from '../../shared/url-paths.ts'
import { AppUnreachableError } from '../../errors.ts'
import type { Release } from '../../lifecycle/concurrency-gate.ts'
import { closeOnceAnswered } from '../../shared/http-answers.ts'
import { describeNetworkError } from '../../shared/network-errors.ts'
import type { UpgradeCall } from '../../call/upgrade-call.ts'
import { appRequestHeaders, headerListToObject } from '../../call/forward-headers.ts'
import { appRequestPath } from '../../call/match-route.ts'
import type { SidecarMetrics } from '../../metrics/metrics.ts'
import { requireCjs } from '../../shared/require-cjs.ts'

export interface WebSocketForwardDeps {
  readonly config: SidecarConfig
  readonly metrics: SidecarMetrics
  /** Undefined when auth is disabled (then `Authorization` passes through). */
  readonly verifier: unknown
}

export interface WebSocketForward {
  /** The forward stage of an upgrade: the handshake to the app, then its 101 (and every frame) or its refusal back. */
  toApp: (call: UpgradeCall, slot: Release, head: Buffer) => void
  /** Ends every open WebSocket (the drain's grace period is over). */
  closeAll: () => void
}

/** One upgrade while it is proxied. */
interface Forwarded {
  readonly call: UpgradeCall
  readonly slot: Release
}

/** http-proxy's `ws` pass pipes the raw sockets both ways once the app answers 101. */
export function createWebSocketForward (deps: WebSocketForwardDeps): WebSocketForward {
  const { config } = deps
  const basePath = pathPrefix(config.appUrl)
  const headerRules = { dropAuthorization: deps.verifier !== undefined, dropAcceptEncoding: false, upgrade: true }
  const forwarded = new WeakMap<IncomingMessage, Forwarded>()
  const open = new Set<Duplex>()
  // http-proxy is loaded at the first upgrade: most apps never take a WebSocket
  let proxy: HttpProxy | undefined
  function openProxy (): HttpProxy {
    const httpProxy = requireCjs('http-proxy') as typeof HttpProxy
    const proxy = httpProxy.createProxyServer({ target: config.appUrl.origin, ws: true, xfwd: false, changeOrigin: true })

    proxy.on('proxyReqWs', (proxyReq, req, socket) => {
      const { call, slot } = forwarded.get(req) as Forwarded
      // The caller went away before the app answered: abandon the handshake to the app.
      socket.once('close', () => { if (call.answered !== 101) proxyReq.destroy() })
      proxyReq.on('response', response => {
        call.answered = response.statusCode ?? 502
        // a refusal is the whole answer: http-proxy pipes it and ends the socket's write side, but
        // bytes the caller sent after its headers stay unread, so 'close' would never come
        response.once('end', slot)
        closeOnceAnswered(socket)
      })
      proxyReq.on('upgrade', (response, proxySocket) => {
        // runs before http-proxy writes the 101 from these headers
        response.headers['x-request-id'] = call.runId
        if (socket.destroyed) {
          proxySocket.destroy()
          return
        }
        call.answered = 101
        open.add(socket)
        deps.metrics.websocketConnections.inc()
        socket.once('close', () => {
          open.delete(socket)
          deps.metrics.websocketConnections.dec()
        })
      })
    })
    proxy.on('error', (error, req, socket) => {
      const call = forwarded.get(req)?.call
      if (call === undefined || call.answered === 101 || !('write' in socket)) socket.destroy()
      else call.answer(new AppUnreachableError(describeNetworkError(error), config.appUrl.href))
    })
    return proxy
  }

  return {
    toApp (call, slot, head) {
      if (call.settled) return // the caller left while waiting for a slot
      const { req } = call
      req.headers = headerListToObject(appRequestHeaders(req, call.runId, headerRules))
      req.url = appRequestPath(call.route, basePath)
      forwarded.set(req, { call, slot })
      call.forwarded = true
      proxy ??= openProxy()
      proxy.ws(req, call.socket, head)
    },
    closeAll: () => { for (const socket of open) socket.destroy() }
  }
}
