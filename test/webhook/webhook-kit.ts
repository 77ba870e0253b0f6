import { execFileSync } from 'node:child_process'
import type { OutgoingHttpHeaders } from 'node:http'
import { fetchMetrics, parseMetrics } from '../helpers/admin-metrics.ts'
import { type Harness, type LogLine, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { send, type SentResponse } from '../helpers/http-client.ts'

export const ISO_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
export const ENVELOPE_KEYS = ['run_id', 'status_code', 'result', 'run_time_ms', 'timestamp']

/** Loopback receivers are allowed; pauses between attempts are short. */
export const LOOPBACK_ENV = { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_MAX_DELAY_MS: '50' }

export { sidecarFor } from '../helpers/sidecar-harness.ts'
// the one sleep, under the name webhook-delivery.test.ts imports
export { sleep as wait } from '../helpers/timing.ts'

/**
 * The app behind the sidecar, by path:
 * /json, /text, /unicode, /status/<n> (body {"detail":"app said no"}), /ndjson, /sse, /chunks (chunked,
 * one write every 30 ms), /big?n=<bytes> (a JSON string of n bytes in total), /cut (two NDJSON lines,
 * then the connection is destroyed), /reset (destroyed before answering), /slow?ms=<n>.
 */
export async function startWebhookApp (): Promise<TestServer> {
  return await startTestServer((req, res) => {
    const url = new URL(req.url as string, 'http://app')
    const path = url.pathname
    if (path === '/json' || path === '/run') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"answer": 42, "list": [1, "two"]}')
    } else if (path === '/text') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('plain words')
    } else if (path === '/unicode') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"greeting":"héllo ✓ 😀","n":1}')
    } else if (path.startsWith('/status/')) {
      res.writeHead(Number(path.slice(8)), { 'content-type': 'application/json' }).end('{"detail":"app said no"}')
    } else if (path === '/ndjson') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('{"n":1}\n\n   \n"two"\nplain text\n[3]\n')
    } else if (path === '/sse') {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(': a comment\n\ndata: {"n":1}\n\ndata: hello\n\nevent: custom\ndata: line1\ndata: line2\n\n')
    } else if (path === '/sse-bom') {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end('\ufeffdata: first\n\ndata: second\n\n')
    } else if (path === '/chunks') {
      res.writeHead(200, { 'content-type': 'text/plain' })
      const parts = ['{"n":1}', 'text chunk', '[1,2]']
      const next = (): void => {
        const part = parts.shift()
        if (part === undefined) { res.end(); return }
        res.write(part)
        setTimeout(next, 30)
      }
      next()
    } else if (path === '/big') {
      const n = Number(url.searchParams.get('n'))
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify('x'.repeat(n - 2)))
    } else if (path === '/bigstream') {
      const n = Number(url.searchParams.get('n'))
      res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end(`"${'y'.repeat(n)}"\n"${'z'.repeat(n)}"\n`)
    } else if (path === '/cut') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' })
      res.write('{"n":1}\n"two"\n')
      setTimeout(() => { req.socket.destroy() }, 50)
    } else if (path === '/reset') {
      req.socket.destroy()
    } else if (path === '/slow') {
      setTimeout(() => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"slow":true}') }, Number(url.searchParams.get('ms')))
    } else {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"app 404"}')
    }
  })
}

/** `/v4/proj/app<path>` with `webhookEndpoint=<endpoint>` (URL-encoded) appended to the query. */
export function invokePath (path: string, endpoint: string | undefined): string {
  if (endpoint === undefined) return `/v4/proj/app${path}`
  const sep = path.includes('?') ? '&' : '?'
  return `/v4/proj/app${path}${sep}webhookEndpoint=${encodeURIComponent(endpoint)}`
}

export async function call (h: Harness, path: string, endpoint: string | undefined,
  options: { method?: string, headers?: OutgoingHttpHeaders, body?: string | Buffer | Array<string | Buffer> } = {}): Promise<SentResponse> {
  return await send(h.base + invokePath(path, endpoint), { method: options.method ?? 'POST', headers: options.headers, body: options.body ?? '{}' })
}

export interface WebhookCounts {
  attempts: Record<string, number>
  deliveries: Record<string, number>
}

/** The non-zero webhook counters from `/metrics`, by label value. */
export async function webhookCounts (h: Harness): Promise<WebhookCounts> {
  const counts: WebhookCounts = { attempts: {}, deliveries: {} }
  for (const { name, labels, value } of parseMetrics(await fetchMetrics(h.admin))) {
    if (value === 0) continue
    if (name === 'sidecar_webhook_attempts_total' && labels.outcome !== undefined) counts.attempts[labels.outcome] = value
    else if (name === 'sidecar_webhook_deliveries_total' && labels.result !== undefined) counts.deliveries[labels.result] = value
  }
  return counts
}

/** Total of the deliveries counter (delivered + failed + dropped). */
export async function deliveriesFinished (h: Harness): Promise<number> {
  const { deliveries } = await webhookCounts(h)
  return Object.values(deliveries).reduce((a, b) => a + b, 0)
}

export const linesWith = (logs: LogLine[], msg: string): LogLine[] => logs.filter(line => line.msg === msg)

const PY_HMAC = [
  'import hashlib, hmac, sys',
  'secret, run_id, ts = sys.argv[1:4]',
  'body = sys.stdin.buffer.read()',
  "sys.stdout.write(hmac.new(secret.encode('utf-8'), run_id.encode('utf-8') + b'.' + ts.encode('ascii') + b'.' + body, hashlib.sha256).hexdigest())"
].join('\n')

/** HMAC-SHA256 of `<runId>.<timestamp>.<body>` in lowercase hex, computed by Python (an independent implementation). */
export function pythonSignature (secret: string, runId: string, timestamp: string, body: Buffer): string {
  return execFileSync('python3', ['-c', PY_HMAC, secret, runId, timestamp], { input: body }).toString('utf8')
}
