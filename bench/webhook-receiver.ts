import { createServer } from 'node:http'

/**
 * The webhooks scenario's receiver: counts deliveries by `X-Request-Id`, so the bench can tell
 * duplicates and missing ones after a run. Run as its own process:
 * `PORT=… node --import tsx bench/webhook-receiver.ts`
 *
 *   POST /hook    a delivery: 200 at once; counted by its X-Request-Id (a body whose run_id
 *                 differs, or that is not JSON, counts as malformed)
 *   GET  /ids     text, one `<id> <deliveries>` line per id received since the last reset
 *   GET  /stats   {"deliveries", "unique", "malformed", "connections"} (connections: TCP connections accepted)
 *   POST /reset   forgets everything
 *   GET  /health  200
 */
const port = Number(process.env.PORT ?? 8194)
const host = process.env.HOST ?? '127.0.0.1'

let counts = new Map<string, number>()
let deliveries = 0
let malformed = 0
let connections = 0

function wellFormed (id: string, body: string): boolean {
  try {
    const parsed = JSON.parse(body) as { run_id?: unknown, status_code?: unknown }
    return parsed.run_id === id && typeof parsed.status_code === 'number'
  } catch {
    return false
  }
}

const server = createServer((req, res) => {
  const path = (req.url ?? '/').split('?', 1)[0]
  if (path === '/hook' && req.method === 'POST') {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => { chunks.push(chunk) })
    req.on('end', () => {
      const id = String(req.headers['x-request-id'] ?? '')
      deliveries++
      counts.set(id, (counts.get(id) ?? 0) + 1)
      if (!wellFormed(id, Buffer.concat(chunks).toString('utf8'))) malformed++
      res.writeHead(200, { 'content-length': '0' }).end()
    })
    return
  }
  if (path === '/ids') {
    const lines: string[] = []
    for (const [id, n] of counts) lines.push(`${id} ${n}`)
    res.writeHead(200, { 'content-type': 'text/plain' }).end(lines.join('\n'))
    return
  }
  if (path === '/stats') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ deliveries, unique: counts.size, malformed, connections }))
    return
  }
  if (path === '/reset' && req.method === 'POST') {
    counts = new Map()
    deliveries = 0
    malformed = 0
    connections = 0
    res.writeHead(204).end()
    return
  }
  if (path === '/health') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}')
    return
  }
  res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"not found"}')
})
server.on('connection', () => { connections++ })
server.keepAliveTimeout = 60_000
server.listen(port, host, () => { process.stdout.write(`webhook receiver on ${host}:${port}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  server.close(() => process.exit(0))
})
