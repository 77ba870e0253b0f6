import { createServer, type IncomingMessage, request, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { WebSocket, WebSocketServer } from 'ws'
import { scrape } from '../helpers/admin-metrics.ts'
import { send, type SentResponse } from '../helpers/http-client.ts'
import { eventually, type Harness, sidecarFor as harnessFor } from '../helpers/sidecar-harness.ts'
import type { SidecarOptions } from '../../src/sidecar/sidecar.ts'

// Shared by the issue-6 tests (concurrency gate, readiness waiters, deadlines).

type Teardown = { teardown: (fn: () => unknown) => void }

/** One request the app has seen: its run id and path; `closed` turns true when its connection or response closes. */
export interface SeenRequest {
  readonly id: string
  readonly path: string
  readonly req: IncomingMessage
  readonly res: ServerResponse
  closed: boolean
}

export type AppHandler = (seen: SeenRequest) => void

/**
 * An app on loopback that records each request (as soon as its headers arrive, in that order)
 * and hands it to `handler`; WebSocket upgrades on any path are accepted and echoed.
 * `port` listens on that port instead of a free one.
 */
export interface MixedApp {
  readonly server: Server
  readonly port: number
  readonly url: string
  readonly seen: SeenRequest[]
  /** Run ids seen on `path` (all paths when undefined). */
  ids: (path?: string) => string[]
  /** WebSocket connections the app has open. */
  readonly sockets: Set<WebSocket>
  close: () => Promise<void>
}

export async function startMixedApp (handler: AppHandler, port = 0): Promise<MixedApp> {
  const seen: SeenRequest[] = []
  const sockets = new Set<WebSocket>()
  const connections = new Set<Socket>()
  const server = createServer((req, res) => {
    const entry: SeenRequest = {
      id: String(req.headers['x-request-id']),
      path: (req.url as string).split('?', 1)[0] as string,
      req,
      res,
      closed: false
    }
    seen.push(entry)
    req.on('error', () => {})
    res.once('close', () => { entry.closed = true })
    req.resume()
    handler(entry)
  })
  server.on('connection', (socket: Socket) => {
    connections.add(socket)
    socket.on('error', () => {})
    socket.once('close', () => connections.delete(socket))
  })
  const wss = new WebSocketServer({ server, perMessageDeflate: false })
  wss.on('connection', ws => {
    sockets.add(ws)
    ws.on('error', () => {})
    ws.on('close', () => sockets.delete(ws))
    ws.on('message', (data, isBinary) => { ws.send(data as Buffer, { binary: isBinary }) })
  })
  await new Promise<void>(resolve => server.listen(port, '127.0.0.1', resolve))
  const actual = (server.address() as AddressInfo).port
  return {
    server,
    port: actual,
    url: `http://127.0.0.1:${actual}`,
    seen,
    ids: path => seen.filter(s => path === undefined || s.path === path).map(s => s.id),
    sockets,
    close: async () => {
      for (const ws of wss.clients) ws.terminate()
      for (const socket of connections) socket.destroy()
      await new Promise(resolve => wss.close(resolve))
      await new Promise(resolve => server.close(resolve))
    }
  }
}

export const json = (res: ServerResponse, value: unknown, status = 200): void => {
  if (res.destroyed) return
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value))
}

/** A sidecar (auth off) in front of `appUrl`, closed at teardown. */
export async function sidecarFor (t: Teardown, appUrl: string, env: Record<string, string> = {},
  options: Omit<SidecarOptions, 'logDestination'> = {}): Promise<Harness> {
  return await harnessFor(t, appUrl, { DISABLE_AUTH: 'true', ...env }, options)
}

/** The in-flight and queued gauges, from one scrape. */
export async function gauges (h: Harness): Promise<{ inflight: number, queued: number }> {
  const m = await scrape(h)
  return { inflight: m.sidecar_inflight_requests as number, queued: m.sidecar_queued_requests as number }
}

/** Waits until the gauges read exactly `want`; the error names what they read last. */
export async function gaugesReach (h: Harness, want: { inflight?: number, queued?: number }, ms = 5000): Promise<void> {
  let last = { inflight: NaN, queued: NaN }
  try {
    await eventually(async () => {
      last = await gauges(h)
      return (want.inflight === undefined || last.inflight === want.inflight) && (want.queued === undefined || last.queued === want.queued)
    }, ms)
  } catch {
    throw new Error(`gauges never read ${JSON.stringify(want)}; last ${JSON.stringify(last)}`)
  }
}

/** GET `/v4/proj/app<path>` with X-Request-Id `id` (and a webhookEndpoint when given). */
export function invoke (h: Harness, path: string, id: string, webhook?: string, headers: Record<string, string> = {}): Promise<SentResponse> {
  const query = webhook === undefined ? '' : `${path.includes('?') ? '&' : '?'}webhookEndpoint=${encodeURIComponent(webhook)}`
  const response = send(`${h.base}/v4/proj/app${path}${query}`, { headers: { 'x-request-id': id, ...headers } })
  // a test that fails early leaves calls pending; their rejection at teardown must not count as unhandled
  response.catch(() => {})
  return response
}

/** Tracks whether a promise has settled (for "still waiting" assertions). */
export function settledFlag<T> (promise: Promise<T>): () => boolean {
  let settled = false
  promise.then(() => { settled = true }, () => { settled = true })
  return () => settled
}

/**
 * A request the caller can abandon: resolves `response` with the status, or with the error code
 * when the connection fails; `abort()` destroys it.
 */
export function abandonable (url: string, id: string): { response: Promise<string>, abort: () => void } {
  let abort: () => void = () => {}
  const response = new Promise<string>(resolve => {
    const req = request(url, { agent: false, headers: { 'x-request-id': id } }, res => {
      res.resume()
      resolve(`status ${res.statusCode}`)
    })
    req.on('error', error => { resolve((error as NodeJS.ErrnoException).code ?? 'error') })
    req.end()
    abort = () => { req.destroy() }
  })
  return { response, abort }
}

/**
 * Makes request arrival at the in-process sidecar observable: resolves `next()` the moment the
 * sidecar takes in its next request. Its InflightTracker.begin() is the first thing the sidecar
 * does with a request, synchronously, before the concurrency gate; a GET without a body reaches
 * the gate in the same tick, so waiting for it before sending the next request makes the
 * arrival order exact (no guessing about TCP accept order).
 */
export function watchArrivals (h: Harness): { next: () => Promise<void>, count: () => number } {
  const tracker = h.sidecar.inflight
  const begin = tracker.begin.bind(tracker)
  let count = 0
  let waiter: (() => void) | undefined
  tracker.begin = () => {
    begin()
    count++
    const wake = waiter
    waiter = undefined
    wake?.()
  }
  return {
    next: async () => await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { reject(new Error('the sidecar took in no request')) }, 5000)
      waiter = () => { clearTimeout(timer); resolve() }
    }),
    count: () => count
  }
}

/** A `ws` client through the sidecar, open; terminated at teardown. */
export async function openWebSocket (t: Teardown, h: Harness, path: string, id: string): Promise<WebSocket> {
  const ws = new WebSocket(`ws://127.0.0.1:${h.sidecar.port}/v4/proj/app${path}`, { headers: { 'x-request-id': id } })
  t.teardown(() => { ws.terminate() })
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => { resolve() })
    ws.once('error', reject)
    ws.once('unexpected-response', (_req, res) => { reject(new Error(`upgrade refused: ${res.statusCode}`)) })
  })
  ws.on('error', () => {})
  return ws
}

/** Sends `text` and waits for its echo (failing after `ms`, or when the socket closes first). */
export async function echo (ws: WebSocket, text: string, ms = 3000): Promise<string> {
  return await new Promise<string>((resolve, reject) => {
    const done = (): void => { clearTimeout(timer); ws.off('message', onMessage); ws.off('close', onClose) }
    const onMessage = (data: unknown): void => { done(); resolve((data as Buffer).toString()) }
    const onClose = (): void => { done(); reject(new Error(`the WebSocket closed before echoing ${JSON.stringify(text)}`)) }
    const timer = setTimeout(() => { done(); reject(new Error(`no echo of ${JSON.stringify(text)} in ${ms} ms`)) }, ms)
    ws.on('message', onMessage)
    ws.on('close', onClose)
    ws.send(text)
  })
}
