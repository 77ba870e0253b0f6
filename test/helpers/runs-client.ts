import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import { openStream, type OpenStream } from '../stream/sse-test-kit.ts'
import { send, type SentResponse } from './http-client.ts'
import { eventually, type Harness, startHarness, startTestServer, type TestServer } from './sidecar-harness.ts'
import { startWebhookReceiver, type WebhookReceiver } from './webhook-receiver.ts'

/** A run record as `GET …/_runs/{id}` answers it (the fields of docs/runs.md, "The record"; absent ones are absent). */
export interface RunRecordBody {
  run_id: string
  status: 'queued' | 'running' | 'succeeded' | 'failed' | 'canceled'
  created_at: string
  started_at?: string
  completed_at?: string
  queue_time_ms?: number
  run_time_ms?: number
  status_code?: number
  result?: unknown
  error?: { message: string }
  attempt?: number
  interruptions?: Array<{ attempt: number, reason: string, at: string }>
  webhook?: { status: 'pending' | 'delivered' | 'failed', attempts: number }
}

/** What a RunsClient calls: a sidecar's base URL, the project and app, and a token when auth is on. */
export interface RunsTarget {
  readonly base: string
  readonly project?: string
  readonly app?: string
  readonly token?: string
}

/** A record read: the raw answer and the record it holds. */
export interface RecordRead {
  readonly response: SentResponse
  readonly record: RunRecordBody
}

/** Calls one app's `/v4` routes and its `_runs` routes through a real sidecar. */
export interface RunsClient {
  /** `/v4/{project}/{app}` */
  readonly prefix: string
  /** `<base>/v4/{project}/{app}/_runs/{runId}` + `suffix` */
  runUrl: (runId: string, suffix?: string) => string
  /** Headers with the token (when there is one) and `extra`. */
  headers: (extra?: OutgoingHttpHeaders) => OutgoingHttpHeaders
  /** A `/v4` call (POST unless told) of `path` (`/x?y=1`), with the token. */
  call: (path: string, options?: { method?: string, headers?: OutgoingHttpHeaders, body?: string | Buffer | Array<string | Buffer> }) => Promise<SentResponse>
  /** A `?async=true` call (POST unless told); `runId` becomes its X-Request-Id. */
  submit: (path: string, runId: string, options?: { method?: string, headers?: OutgoingHttpHeaders, body?: string | Buffer | Array<string | Buffer> }) => Promise<SentResponse>
  /** `GET …/_runs/{id}`; throws unless it answers 200. */
  read: (runId: string) => Promise<RecordRead>
  /** Reads the record until `check` holds (polling), and returns it. */
  until: (runId: string, check: (record: RunRecordBody) => boolean, ms?: number) => Promise<RunRecordBody>
  /** Reads the record until it has ended, and returns the last read. */
  finished: (runId: string, ms?: number) => Promise<RecordRead>
  /** `POST …/_runs/{id}/cancel`. */
  cancel: (runId: string) => Promise<SentResponse>
  /** Opens `GET …/_runs/{id}/events` (+ `query`) as an SSE reader. */
  follow: (runId: string, options?: { query?: string, headers?: Record<string, string> }) => Promise<OpenStream>
}

const FINISHED = new Set(['succeeded', 'failed', 'canceled'])

/** A client for one app (default project `p`, app `a`) of the sidecar at `target.base`. */
export function runsClient (target: RunsTarget): RunsClient {
  const prefix = `/v4/${target.project ?? 'p'}/${target.app ?? 'a'}`
  const headers = (extra: OutgoingHttpHeaders = {}): OutgoingHttpHeaders =>
    target.token === undefined ? { ...extra } : { authorization: `Bearer ${target.token}`, ...extra }
  const runUrl = (runId: string, suffix = ''): string => `${target.base}${prefix}/_runs/${runId}${suffix}`
  const recordIn = (runId: string, response: SentResponse): RecordRead => {
    if (response.status !== 200) throw new Error(`record of ${runId}: ${response.status} ${response.text}`)
    return { response, record: response.json() as RunRecordBody }
  }
  const read = async (runId: string): Promise<RecordRead> => recordIn(runId, await send(runUrl(runId), { headers: headers() }))
  const client: RunsClient = {
    prefix,
    runUrl,
    headers,
    call: async (path, options = {}) => await send(`${target.base}${prefix}${path}`, {
      method: options.method ?? 'POST', headers: headers(options.headers), ...(options.body === undefined ? {} : { body: options.body })
    }),
    submit: async (path, runId, options = {}) => {
      const withAsync = path + (path.includes('?') ? '&' : '?') + 'async=true'
      return await client.call(withAsync, { ...options, headers: { 'x-request-id': runId, ...options.headers } })
    },
    read,
    until: async (runId, check, ms = 5000) => {
      let last: RunRecordBody | undefined
      await eventually(async () => {
        last = (await read(runId)).record
        return check(last)
      }, ms).catch((error: unknown) => {
        throw new Error(`record of ${runId} never matched; last: ${JSON.stringify(last)}`, { cause: error })
      })
      return last as RunRecordBody
    },
    finished: async (runId, ms = 5000) => {
      let last: RecordRead | undefined
      await eventually(async () => {
        // a 503 (run store unavailable, Retry-After: a sidecar reconnecting after a failover) is asked again, as a caller would
        const response = await send(runUrl(runId), { headers: headers() })
        if (response.status === 503) return false
        last = recordIn(runId, response)
        return FINISHED.has(last.record.status)
      }, ms)
      return last as RecordRead
    },
    cancel: async runId => await send(runUrl(runId, '/cancel'), { method: 'POST', headers: headers() }),
    follow: async (runId, options = {}) => {
      const auth: Record<string, string> = target.token === undefined ? {} : { authorization: `Bearer ${target.token}` }
      return await openStream(runUrl(runId, `/events${options.query ?? ''}`), { ...auth, ...options.headers })
    }
  }
  return client
}

/** One request the app holds open until the test answers it. */
export interface HeldRequest {
  readonly req: IncomingMessage
  readonly res: ServerResponse
  readonly url: string
  /** Resolves with performance.now() when the connection closes before the app answered in full (the sidecar cut it). */
  readonly cut: Promise<number>
  /** Whether the request was cut. */
  readonly wasCut: () => boolean
}

/**
 * An app for run tests, routed by the path's first segment:
 * - `/json…`: 200 JSON `{"method","url","body"}`;
 * - `/text…`: 200 text/plain `plain text`;
 * - `/status/{n}…`: status n, text/plain body `status {n}`;
 * - `/reset…`: the connection is destroyed;
 * - `/ready`: 200 while `ready` is true, else 503;
 * - `/hold…`: held until the test answers (see `held`), its cut observed;
 * - `/sse…`, `/ndjson…`, `/jsonl…`, `/chunks…`: 200 with that stream's Content-Type (chunks: text/plain, no
 *   Content-Length), held open in `held` for the test to write to.
 */
export interface RunsApp extends TestServer {
  readonly held: HeldRequest[]
  /** Waits until `n` requests are held, and returns the n-th. */
  waitForHeld: (n: number, ms?: number) => Promise<HeldRequest>
  /** The requests whose path starts with `prefix`. */
  requestsTo: (prefix: string) => TestServer['requests']
  /** What `GET /ready` answers: 200 while true, else 503 (for READYCHECK_PATH=/ready). */
  ready: boolean
}

const STREAM_TYPES: Record<string, string> = {
  sse: 'text/event-stream', ndjson: 'application/x-ndjson', jsonl: 'application/jsonl', chunks: 'text/plain'
}

export async function startRunsApp (): Promise<RunsApp> {
  const held: HeldRequest[] = []
  let runsApp: RunsApp | undefined
  const app = await startTestServer((req, res, body) => {
    const url = req.url as string
    const first = url.split(/[/?]/)[1] ?? ''
    if (first === 'hold' || STREAM_TYPES[first] !== undefined) {
      let cut = false
      const closed = new Promise<number>(resolve => {
        res.once('close', () => {
          if (res.writableFinished) return
          cut = true
          resolve(performance.now())
        })
      })
      if (STREAM_TYPES[first] !== undefined) {
        res.writeHead(200, { 'content-type': STREAM_TYPES[first] })
        res.flushHeaders()
      }
      held.push({ req, res, url, cut: closed, wasCut: () => cut })
      return
    }
    if (first === 'json') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ method: req.method, url, body: body.toString('utf8') }))
    } else if (first === 'text') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('plain text')
    } else if (first === 'status') {
      const status = Number(url.split(/[/?]/)[2])
      res.writeHead(status, { 'content-type': 'text/plain' }).end(`status ${status}`)
    } else if (first === 'ready') {
      res.writeHead(runsApp?.ready === false ? 503 : 200).end()
    } else if (first === 'reset') {
      req.socket.destroy()
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('no route')
    }
  })
  runsApp = Object.assign(app, {
    ready: true,
    held,
    waitForHeld: async (n: number, ms = 5000): Promise<HeldRequest> => {
      await eventually(() => held.length >= n, ms)
      return held[n - 1] as HeldRequest
    },
    requestsTo: (prefix: string) => app.requests.filter(r => r.url.startsWith(prefix))
  })
  return runsApp
}

interface Teardown { teardown: (fn: () => unknown) => void }

/** A runs app (startRunsApp), closed at `t`'s teardown. */
export async function runsAppFor (t: Teardown): Promise<RunsApp> {
  const app = await startRunsApp()
  t.teardown(() => app.close())
  return app
}

/** An in-process sidecar in front of `appUrl` with `env`, closed at `t`'s teardown. */
export async function runsSidecarFor (t: Teardown, appUrl: string, env: Record<string, string> = {}): Promise<Harness> {
  const h = await startHarness(appUrl, env)
  t.teardown(() => h.close())
  return h
}

/** A webhook receiver (startWebhookReceiver), closed at `t`'s teardown. */
export async function receiverFor (t: Teardown, ...script: Parameters<typeof startWebhookReceiver>): Promise<WebhookReceiver> {
  const receiver = await startWebhookReceiver(...script)
  t.teardown(() => receiver.close())
  return receiver
}
