import { createServer, type ServerResponse } from 'node:http'
import { setImmediate as nextTurn } from 'node:timers/promises'

/**
 * The sse scenario's app: NDJSON streams whose every line carries the moment it was written,
 * so a client on the same machine can tell each event's latency. Run as its own process:
 * `PORT=… node --import tsx bench/stream-app.ts`
 *
 *   GET /stream?interval_ms=10&duration_ms=5000&count=…  application/x-ndjson, one line per event:
 *       {"i": <0, 1, …>, "t": <epoch µs when written>}
 *     interval_ms > 0: one event every interval_ms (the first after a random part of it, so that
 *       many streams do not tick together); 0: as fast as the connection takes them, yielding to
 *       the event loop after each event, as a generator would.
 *     Ends after duration_ms or count events, whichever comes first (default: 10 events at once).
 *   GET /health  200
 */
const port = Number(process.env.PORT ?? 8193)
const host = process.env.HOST ?? '127.0.0.1'

/** Epoch microseconds from the high-resolution clock, comparable across processes on one machine. */
const nowUs = (): number => Math.round((performance.timeOrigin + performance.now()) * 1000)

function numberParam (query: URLSearchParams, name: string, fallback: number): number {
  const value = Number(query.get(name) ?? fallback)
  return Number.isFinite(value) && value >= 0 ? value : fallback
}

async function stream (res: ServerResponse, intervalMs: number, durationMs: number, count: number): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-cache' })
  const start = performance.now()
  const end = start + durationMs
  let gone = false
  res.once('close', () => { gone = true })
  let due = start + Math.random() * intervalMs
  for (let i = 0; i < count && !gone; i++) {
    if (intervalMs > 0) {
      const wait = due - performance.now()
      if (wait > 0) await new Promise(resolve => setTimeout(resolve, wait))
      due += intervalMs
    }
    if (performance.now() >= end || gone) break
    const writable = res.write(`{"i":${i},"t":${nowUs()}}\n`)
    if (!writable) await new Promise(resolve => { res.once('drain', resolve); res.once('close', resolve) })
    else if (intervalMs === 0) await nextTurn()
  }
  res.end()
}

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://app')
  if (url.pathname === '/health') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}')
    return
  }
  if (url.pathname === '/stream' && req.method === 'GET') {
    const q = url.searchParams
    const durationMs = numberParam(q, 'duration_ms', 60_000)
    const count = numberParam(q, 'count', q.has('duration_ms') ? Number.MAX_SAFE_INTEGER : 10)
    stream(res, numberParam(q, 'interval_ms', 0), durationMs, count).catch(() => { res.destroy() })
    return
  }
  res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"not found"}')
})
server.listen(port, host, () => { process.stdout.write(`stream app on ${host}:${port}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  server.close(() => process.exit(0))
})
