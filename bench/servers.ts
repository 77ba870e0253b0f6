import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { setImmediate as nextTurn } from 'node:timers/promises'

/**
 * The bench-only servers, each its own process (startBenchServer): `PORT=… node --import tsx
 * bench/servers.ts <name>`, each answering GET /health. The OTLP collector is test/helpers', loaded
 * only by the process running it: the others load nothing but Node's (the large-body app's RSS is a figure).
 */
const port = Number(process.env.PORT)
const host = process.env.HOST ?? '127.0.0.1'

type Handler = (req: IncomingMessage, res: ServerResponse) => boolean
type Route = (req: IncomingMessage, res: ServerResponse, query: URLSearchParams) => void

const json = (res: ServerResponse, status: number, body: string): void => { res.writeHead(status, { 'content-type': 'application/json' }).end(body) }
const pathOf = (req: IncomingMessage): string => (req.url ?? '/').split('?', 1)[0] as string

/** Answers `METHOD /path` (`* /path`: any method) from `routes`, GET /health with 200, anything else with 404. */
function router (routes: Record<string, Route>): Handler {
  return (req, res) => {
    const url = req.url ?? '/'
    const path = pathOf(req)
    const route = routes[`${req.method} ${path}`] ?? routes[`* ${path}`]
    if (route !== undefined) route(req, res, new URLSearchParams(url.slice(path.length + 1)))
    else if (path === '/health') json(res, 200, '{"status":"ok"}')
    else json(res, 404, '{"message":"not found"}')
    return true
  }
}

/** Serves `handler` on PORT and HOST. */
async function listen (handler: Handler): Promise<void> {
  const server = createServer(handler)
  await new Promise<void>(resolve => server.listen(port, host, resolve))
}

/** A non-negative number from the query, else `fallback`. */
function numberParam (query: URLSearchParams, name: string, fallback: number): number {
  const value = Number(query.get(name) ?? fallback)
  return Number.isFinite(value) && value >= 0 ? value : fallback
}

/** Epoch microseconds from the high-resolution clock, comparable across processes on one machine. */
const nowUs = (): number => Math.round((performance.timeOrigin + performance.now()) * 1000)

/** Resolves when the socket takes more, or when the response is gone (a caller that left). */
const drained = async (res: ServerResponse): Promise<void> => await new Promise(resolve => {
  const done = (): void => { res.off('drain', done); res.off('close', done); resolve() }
  res.on('drain', done)
  res.on('close', done)
})

async function ndjson (res: ServerResponse, intervalMs: number, durationMs: number, count: number): Promise<void> {
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
    if (!res.write(`{"i":${i},"t":${nowUs()}}\n`)) await drained(res)
    else if (intervalMs === 0) await nextTurn()
  }
  res.end()
}

/**
 * The sse and async scenarios' app. `GET /stream?interval_ms=&duration_ms=&count=`: NDJSON lines
 * `{"i": n, "t": <epoch µs when written>}`, one every interval_ms (the first after a random part of
 * it) or, at 0, as fast as the connection takes them (yielding after each); until duration_ms or
 * count events (default: 10 events at once).
 */
async function streamApp (): Promise<void> {
  await listen(router({
    'GET /stream': (_req, res, q) => {
      const count = numberParam(q, 'count', q.has('duration_ms') ? Number.MAX_SAFE_INTEGER : 10)
      ndjson(res, numberParam(q, 'interval_ms', 0), numberParam(q, 'duration_ms', 60_000), count).catch(() => { res.destroy() })
    }
  }))
}

/**
 * The gate and async scenarios' app: `/run` answers {"ok": true} after HOLD_MS (default 20); it
 * keeps a time-weighted count of the calls in progress (arrival to the response's close): `/stats`
 * {"averageConcurrency", "maxConcurrency", "calls", "elapsedMs"} since `POST /reset`. A call whose
 * body is `{"t": <epoch µs>}` (when its caller sent it) also records its arrival − t in ms: `/lags`
 * returns them, in arrival order, since `POST /reset`.
 */
async function slowApp (): Promise<void> {
  const holdMs = Number(process.env.HOLD_MS ?? 20)
  const body = '{"ok":true}'
  let current = 0
  let area = 0
  let last = performance.now()
  let windowStart = last
  let maxConcurrency = 0
  let calls = 0
  let lags: number[] = []
  const change = (delta: number): void => {
    const now = performance.now()
    area += current * (now - last)
    last = now
    current += delta
    if (current > maxConcurrency) maxConcurrency = current
  }
  await listen(router({
    '* /run': (req, res) => {
      const arrivedUs = nowUs()
      change(1)
      calls++
      res.once('close', () => { change(-1) })
      let received = ''
      req.setEncoding('utf8')
      req.on('data', (chunk: string) => { if (received.length < 64) received += chunk })
      req.once('end', () => {
        const sent = /^\{"t":(\d+)\}$/.exec(received)?.[1]
        if (sent !== undefined) lags.push((arrivedUs - Number(sent)) / 1000)
      })
      setTimeout(() => {
        if (!res.destroyed) res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length }).end(body)
      }, holdMs)
    },
    '* /stats': (_req, res) => {
      change(0)
      const elapsedMs = last - windowStart
      json(res, 200, JSON.stringify({ averageConcurrency: elapsedMs > 0 ? area / elapsedMs : 0, maxConcurrency, calls, elapsedMs }))
    },
    '* /lags': (_req, res) => { json(res, 200, JSON.stringify(lags)) },
    'POST /reset': (_req, res) => {
      change(0)
      area = 0
      windowStart = last
      maxConcurrency = current
      calls = 0
      lags = []
      res.writeHead(204).end()
    }
  }))
}

/**
 * The large-body scenario's app: `GET /body?bytes=N` → `{"data":"xxx…"}` of exactly N bytes (11 ≤
 * N ≤ 10^9), built once per size and kept, written in 64 KiB pieces as the socket takes them.
 */
async function largeBodyApp (): Promise<void> {
  const pieceBytes = 64 * 1024
  const bodies = new Map<number, Buffer>()
  const bodyOf = (bytes: number): Buffer => {
    let body = bodies.get(bytes)
    if (body === undefined) {
      body = Buffer.alloc(bytes, 'x')
      body.write('{"data":"', 0)
      body.write('"}', bytes - 2)
      bodies.set(bytes, body)
    }
    return body
  }
  const send = async (res: ServerResponse, body: Buffer): Promise<void> => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    for (let offset = 0; offset < body.length; offset += pieceBytes) {
      if (res.destroyed) return
      if (!res.write(body.subarray(offset, offset + pieceBytes))) await drained(res)
    }
    res.end()
  }
  const handle = router({
    '* /body': (_req, res, q) => {
      const bytes = Number(q.get('bytes'))
      if (!Number.isInteger(bytes) || bytes < 11 || bytes > 1e9) json(res, 400, '{"message":"bytes: an integer from 11 to 10^9"}')
      else void send(res, bodyOf(bytes))
    }
  })
  await listen((req, res) => { req.resume(); return handle(req, res) })
}

/**
 * The webhooks and recorded scenarios' receiver: 200 at once to `POST /hook`, each delivery counted
 * by X-Request-Id (malformed: not JSON, or another run_id): `/ids` one `<id> <deliveries>` line per
 * id, `/stats` {"deliveries", "unique", "malformed", "connections"}, since `POST /reset`. Its own
 * few lines, not test/helpers' recording receiver: it shares the 2 cores with the sidecar it
 * measures, so it does no more per delivery than count it.
 */
async function webhookReceiver (): Promise<void> {
  let counts = new Map<string, number>()
  let [deliveries, malformed, connections] = [0, 0, 0]
  const wellFormed = (id: string, body: string): boolean => {
    try {
      const parsed = JSON.parse(body) as { run_id?: unknown, status_code?: unknown }
      return parsed.run_id === id && typeof parsed.status_code === 'number'
    } catch {
      return false
    }
  }
  const control = router({
    '* /ids': (_req, res) => { res.writeHead(200, { 'content-type': 'text/plain' }).end([...counts].map(([id, n]) => `${id} ${n}`).join('\n')) },
    '* /stats': (_req, res) => { json(res, 200, JSON.stringify({ deliveries, unique: counts.size, malformed, connections })) },
    'POST /reset': (_req, res) => {
      counts = new Map()
      deliveries = malformed = connections = 0
      res.writeHead(204).end()
    }
  })
  const server = createServer((req, res) => {
    if (req.method !== 'POST' || pathOf(req) !== '/hook') { control(req, res); return }
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => { chunks.push(chunk) })
    req.on('end', () => {
      const id = String(req.headers['x-request-id'] ?? '')
      deliveries++
      counts.set(id, (counts.get(id) ?? 0) + 1)
      if (!wellFormed(id, Buffer.concat(chunks).toString('utf8'))) malformed++
      res.writeHead(200, { 'content-length': '0' }).end()
    })
  })
  server.on('connection', () => { connections++ })
  server.keepAliveTimeout = 60_000
  await new Promise<void>(resolve => server.listen(port, host, resolve))
}

/**
 * The tracing scenario's collector (test/helpers/otlp-receiver.ts): counts the spans of each
 * OTLP/HTTP export to `POST /v1/traces` (protobuf or JSON); `/stats` {"exports", "spans"} since `POST /reset`.
 */
async function otlpReceiver (): Promise<void> {
  const [{ startOtlpReceiver }, { countSpans }] = await Promise.all([import('../test/helpers/otlp-receiver.ts'), import('../test/helpers/otlp-protobuf.ts')])
  interface JsonExport { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: unknown[] }> }> }
  let exports = 0
  let spans = 0
  await startOtlpReceiver({
    port,
    host,
    onExport: (body, protobuf) => {
      exports++
      if (protobuf) { spans += countSpans(body); return }
      for (const resource of (JSON.parse(body.toString('utf8')) as JsonExport).resourceSpans ?? []) {
        for (const scope of resource.scopeSpans ?? []) spans += scope.spans?.length ?? 0
      }
    },
    other: router({
      '* /stats': (_req, res) => { json(res, 200, JSON.stringify({ exports, spans })) },
      'POST /reset': (_req, res) => {
        exports = 0
        spans = 0
        res.writeHead(204).end()
      }
    })
  })
}

const SERVERS: Record<string, () => Promise<void>> = {
  'stream-app': streamApp, 'slow-app': slowApp, 'large-body-app': largeBodyApp, 'webhook-receiver': webhookReceiver, 'otlp-receiver': otlpReceiver
}
const name = process.argv[2] ?? ''
const start = SERVERS[name]
if (start === undefined || !Number.isInteger(port)) throw new Error(`usage: PORT=… node --import tsx bench/servers.ts <${Object.keys(SERVERS).join(' | ')}>`)
await start()
process.stdout.write(`${name} on ${host}:${port}\n`)
