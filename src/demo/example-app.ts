import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { pathToFileURL } from 'node:url'
import { WebSocketServer } from 'ws'

/**
 * The example app behind the demo sidecar: what a user's deployed function looks like to it.
 *   POST /run      {"name": "Ada", "delay_ms": 0} → {"greeting": "Hello, Ada!"} (a function's raw return value, after delay_ms)
 *   POST /generate {"prompt": "…", "delay_ms": 200} → NDJSON, one {"token": …} line per word (a generator)
 *   GET  /events   ?count=5&delay_ms=200 → text/event-stream, numbered events (an SSE app)
 *   GET  /health   200
 *   WS   /ws       echoes every message back, text or binary
 */
export interface ExampleApp {
  readonly port: number
  readonly server: Server
  close: () => Promise<void>
}

async function readJson (req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  const text = Buffer.concat(chunks).toString('utf8')
  return text === '' ? {} : JSON.parse(text)
}

function json (res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

async function route (req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?', 1)[0]
  if (path === '/health') return json(res, 200, { status: 'ok' })
  if (path === '/run' && req.method === 'POST') {
    const input = await readJson(req) as { name?: unknown, delay_ms?: unknown }
    const name = typeof input.name === 'string' ? input.name : 'world'
    const delayMs = delayOf(input.delay_ms, 0)
    // a function that takes its time (a model's forward pass): it answers unless its caller left
    if (delayMs > 0) await new Promise(resolve => setTimeout(resolve, delayMs))
    if (res.destroyed) return
    return json(res, 200, { greeting: `Hello, ${name}!` })
  }
  if (path === '/generate' && req.method === 'POST') {
    const input = await readJson(req) as { prompt?: unknown, delay_ms?: unknown }
    const prompt = typeof input.prompt === 'string' ? input.prompt : 'the quick brown fox jumps over the lazy dog'
    const words = prompt.split(/\s+/).filter(word => word !== '')
    res.writeHead(200, { 'content-type': 'application/x-ndjson' })
    await paced(res, words.length, delayOf(input.delay_ms, 200), i => JSON.stringify({ token: words[i], index: i }) + '\n')
    return
  }
  if (path === '/events') {
    const query = new URL(req.url ?? '/', 'http://app').searchParams
    const count = Math.min(Number(query.get('count') ?? 5) || 5, 10_000)
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
    await paced(res, count, delayOf(query.get('delay_ms'), 200), i => `id: ${i}\ndata: ${JSON.stringify({ n: i, at: new Date().toISOString() })}\n\n`)
    return
  }
  json(res, 404, { message: `no function at ${path}` })
}

function delayOf (value: unknown, fallback: number): number {
  const ms = Number(value ?? fallback)
  return Number.isFinite(ms) && ms >= 0 ? Math.min(ms, 60_000) : fallback
}

/** Writes `count` pieces, one every `delayMs`, as a generator would yield them; stops if the caller leaves. */
async function paced (res: ServerResponse, count: number, delayMs: number, piece: (i: number) => string): Promise<void> {
  for (let i = 0; i < count && !res.destroyed; i++) {
    if (i > 0 && delayMs > 0) await new Promise(resolve => setTimeout(resolve, delayMs))
    res.write(piece(i))
  }
  res.end()
}

export async function startExampleApp (port = 0, host = '127.0.0.1'): Promise<ExampleApp> {
  const server = createServer((req, res) => {
    route(req, res).catch(() => { json(res, 400, { message: 'request body is not JSON' }) })
  })
  const wss = new WebSocketServer({ server, path: '/ws' })
  wss.on('connection', socket => {
    socket.on('message', (data, isBinary) => { socket.send(data, { binary: isBinary }) })
  })
  await new Promise<void>(resolve => server.listen(port, host, resolve))
  return {
    port: (server.address() as AddressInfo).port,
    server,
    close: async () => {
      for (const client of wss.clients) client.terminate()
      wss.close()
      server.closeAllConnections()
      await new Promise(resolve => server.close(resolve))
    }
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const app = await startExampleApp(Number(process.env.PORT ?? 8192), process.env.HOST ?? '127.0.0.1')
  process.stdout.write(`example app listening on ${app.port}\n`)
  process.once('SIGTERM', () => { void app.close().then(() => process.exit(0)) })
}
