import { createServer } from 'node:http'

/**
 * The gate scenario's app: holds every call HOLD_MS (default 20) before answering, and keeps
 * its own time-weighted count of the calls in progress, so the bench can tell how busy the
 * sidecar kept it. Run as its own process: `PORT=… HOLD_MS=20 node --import tsx bench/slow-app.ts`
 *
 *   any method /run   {"ok": true} after HOLD_MS (busy from the request's arrival to its response's close)
 *   GET  /stats       {"averageConcurrency", "maxConcurrency", "calls", "elapsedMs"} since the last reset
 *   POST /reset       starts a new measurement window
 *   GET  /health      200
 */
const port = Number(process.env.PORT ?? 8195)
const host = process.env.HOST ?? '127.0.0.1'
const holdMs = Number(process.env.HOLD_MS ?? 20)
const BODY = '{"ok":true}'

let current = 0
let area = 0
let last = performance.now()
let windowStart = last
let maxConcurrency = 0
let calls = 0

function change (delta: number): void {
  const now = performance.now()
  area += current * (now - last)
  last = now
  current += delta
  if (current > maxConcurrency) maxConcurrency = current
}

const server = createServer((req, res) => {
  const path = (req.url ?? '/').split('?', 1)[0]
  if (path === '/run') {
    change(1)
    calls++
    res.once('close', () => { change(-1) })
    req.resume()
    setTimeout(() => {
      if (!res.destroyed) res.writeHead(200, { 'content-type': 'application/json', 'content-length': BODY.length }).end(BODY)
    }, holdMs)
    return
  }
  if (path === '/stats') {
    change(0)
    const elapsedMs = last - windowStart
    const stats = { averageConcurrency: elapsedMs > 0 ? area / elapsedMs : 0, maxConcurrency, calls, elapsedMs }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stats))
    return
  }
  if (path === '/reset' && req.method === 'POST') {
    change(0)
    area = 0
    windowStart = last
    maxConcurrency = current
    calls = 0
    res.writeHead(204).end()
    return
  }
  if (path === '/health') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}')
    return
  }
  res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"not found"}')
})
server.listen(port, host, () => { process.stdout.write(`slow app (${holdMs} ms per call) on ${host}:${port}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  server.close(() => process.exit(0))
})
