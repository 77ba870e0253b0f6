import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http'
import { connect as netConnect, type AddressInfo, type Socket } from 'node:net'
import type { Duplex } from 'node:stream'
import { WebSocket, WebSocketServer, type ClientOptions } from 'ws'

/** One WebSocket the app accepted. */
export interface AppConnection {
  readonly socket: WebSocket
  /** The request target the app saw (path and query). */
  readonly url: string
  readonly headers: IncomingHttpHeaders
  /** Every message received, in order, as it arrived. */
  readonly received: Array<{ data: Buffer, isBinary: boolean }>
  /** Resolves with the close code and reason the app saw. */
  readonly closed: Promise<{ code: number, reason: string }>
}

/** How the app answers one upgrade request. */
export interface UpgradeDecision {
  /** Refuse with this raw HTTP response instead of upgrading. */
  refuse?: { status: number, reason: string, body: string, headers?: Record<string, string> }
  /** Wait for this before completing the handshake. */
  hold?: Promise<void>
}

export interface WebSocketAppOptions {
  /** Decides per upgrade request; default: accept at once. */
  onUpgrade?: (req: IncomingMessage) => UpgradeDecision | undefined
  /** Passed to the WebSocketServer (default: no compression). */
  perMessageDeflate?: boolean
  /** Listen on this loopback port (default: 0, a free one). */
  port?: number
}

/** A real WebSocket app on loopback port 0: echoes every message, records handshakes. */
export interface WebSocketApp {
  readonly server: Server
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  /** Every upgrade request that reached the app (accepted or refused), in order. */
  readonly handshakes: Array<{ url: string, headers: IncomingHttpHeaders, rawHeaders: string[] }>
  /** The status line and header lines of each 101 the app wrote. */
  readonly responses: string[][]
  readonly connections: AppConnection[]
  /** The next connection the app accepts after this call. */
  nextConnection: () => Promise<AppConnection>
  /** How many upgraded (or upgrading) TCP connections the app still has open. */
  openSockets: () => number
  close: () => Promise<void>
}

export async function startWebSocketApp (options: WebSocketAppOptions = {}): Promise<WebSocketApp> {
  const server = createServer((_req, res) => { res.end('plain http') })
  const wss = new WebSocketServer({
    noServer: true,
    perMessageDeflate: options.perMessageDeflate ?? false,
    handleProtocols: protocols => protocols.has('chat.v1') ? 'chat.v1' : false
  })
  const handshakes: WebSocketApp['handshakes'] = []
  const responses: string[][] = []
  const connections: AppConnection[] = []
  const waiting: Array<(connection: AppConnection) => void> = []
  const sockets = new Set<Duplex>()

  wss.on('headers', headers => { responses.push([...headers]) })

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
    handshakes.push({ url: req.url as string, headers: req.headers, rawHeaders: req.rawHeaders })
    const decision = options.onUpgrade?.(req)
    if (decision?.refuse !== undefined) {
      const { status, reason, body, headers = {} } = decision.refuse
      const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')
      socket.end(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: text/plain\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}connection: close\r\n\r\n${body}`)
      return
    }
    const accept = (): void => {
      wss.handleUpgrade(req, socket, head, ws => { onConnection(ws, req) })
    }
    if (decision?.hold === undefined) accept()
    else void decision.hold.then(accept)
  })

  function onConnection (ws: WebSocket, req: IncomingMessage): void {
    const received: AppConnection['received'] = []
    const closed = new Promise<{ code: number, reason: string }>(resolve => {
      ws.on('close', (code, reason) => { resolve({ code, reason: reason.toString() }) })
    })
    ws.on('error', () => {})
    ws.on('message', (data, isBinary) => {
      const buffer = data as Buffer
      received.push({ data: buffer, isBinary })
      if (ws.readyState === WebSocket.OPEN) ws.send(buffer, { binary: isBinary })
    })
    const connection: AppConnection = { socket: ws, url: req.url as string, headers: req.headers, received, closed }
    connections.push(connection)
    for (const waiter of waiting.splice(0)) waiter(connection)
  }

  await new Promise<void>(resolve => server.listen(options.port ?? 0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    server,
    port,
    url: `http://127.0.0.1:${port}`,
    handshakes,
    responses,
    connections,
    nextConnection: async () => await new Promise(resolve => waiting.push(resolve)),
    openSockets: () => sockets.size,
    close: async () => {
      for (const ws of wss.clients) ws.terminate()
      for (const socket of sockets) socket.destroy()
      server.closeAllConnections()
      await new Promise(resolve => wss.close(resolve))
      await new Promise(resolve => server.close(resolve))
    }
  }
}

/** What a client connecting through the sidecar ended with. */
export type ClientOutcome =
  | { kind: 'open', ws: WebSocket, upgrade: IncomingMessage }
  | { kind: 'refused', status: number, headers: IncomingHttpHeaders, body: string }

/**
 * Connects a `ws` client and waits for the handshake's outcome: open (with the 101 response),
 * or refused (with the non-101 status, headers and body read in full). Closing is the caller's job.
 */
export async function connectClient (url: string, protocols: string[] = [], options: ClientOptions = {}): Promise<ClientOutcome> {
  const ws = new WebSocket(url, protocols, options)
  let upgrade: IncomingMessage | undefined
  ws.on('upgrade', response => { upgrade = response })
  return await new Promise((resolve, reject) => {
    ws.on('open', () => { resolve({ kind: 'open', ws, upgrade: upgrade as IncomingMessage }) })
    ws.on('error', reject)
    ws.on('unexpected-response', (req, res) => {
      ws.off('error', reject)
      ws.on('error', () => {})
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('error', reject)
      res.on('end', () => {
        req.destroy()
        resolve({ kind: 'refused', status: res.statusCode as number, headers: res.headers, body: Buffer.concat(chunks).toString() })
      })
    })
  })
}

/** Waits for the next message on a client socket. */
export async function nextMessage (ws: WebSocket): Promise<{ data: Buffer, isBinary: boolean }> {
  return await new Promise(resolve => {
    ws.once('message', (data, isBinary) => { resolve({ data: data as Buffer, isBinary }) })
  })
}

/** Resolves with the code and reason when a client socket closes. */
export async function clientClosed (ws: WebSocket): Promise<{ code: number, reason: string }> {
  if (ws.readyState === WebSocket.CLOSED) throw new Error('already closed')
  return await new Promise(resolve => {
    ws.once('close', (code, reason) => { resolve({ code, reason: reason.toString() }) })
  })
}

/** A hand-written upgrade request over a raw TCP socket (for exact status lines and bodies). */
export function rawHandshake (path: string, host: string, extraHeaders: Record<string, string> = {}): string {
  const headers = {
    Host: host,
    Connection: 'Upgrade',
    Upgrade: 'websocket',
    'Sec-WebSocket-Version': '13',
    'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==',
    ...extraHeaders
  }
  return `GET ${path} HTTP/1.1\r\n` + Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n'
}

/** Sends a raw upgrade request and returns every byte the server sent until it closed. */
export async function rawUpgrade (port: number, path: string, extraHeaders: Record<string, string> = {}): Promise<string> {
  const socket = await openRaw(port)
  const chunks: Buffer[] = []
  return await new Promise((resolve, reject) => {
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', reject)
    socket.on('close', () => { resolve(Buffer.concat(chunks).toString('latin1')) })
    socket.write(rawHandshake(path, `127.0.0.1:${port}`, extraHeaders))
  })
}

/** A connected raw TCP socket to loopback `port`. */
export async function openRaw (port: number): Promise<Socket> {
  return await new Promise((resolve, reject) => {
    const socket = netConnect(port, '127.0.0.1', () => { socket.off('error', reject); resolve(socket) })
    socket.once('error', reject)
  })
}
