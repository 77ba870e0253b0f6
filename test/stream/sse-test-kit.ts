import { request, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import { createParser } from 'eventsource-parser'
import { startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'

/** One event as a WHATWG parser read it, with when it arrived (performance.now()). */
export interface ParsedEvent {
  event: string | undefined
  id: string | undefined
  data: string
  at: number
}

/** A caller's SSE request in progress: raw bytes with arrival times, and the parsed events. */
export interface OpenStream {
  readonly req: ClientRequest
  readonly res: IncomingMessage
  readonly status: number
  readonly headers: IncomingHttpHeaders
  /** performance.now() when the request was sent, and when status and headers arrived. */
  readonly sentAt: number
  readonly headersAt: number
  readonly chunks: Array<{ at: number, bytes: Buffer }>
  readonly events: ParsedEvent[]
  readonly comments: string[]
  /** All bytes read so far, as UTF-8. */
  raw: () => string
  /** Resolves when the response ended or closed. */
  readonly done: Promise<void>
  ended: () => boolean
  /** Waits until at least `n` events arrived. */
  waitForEvents: (n: number, ms?: number) => Promise<void>
}

/**
 * Sends one request (node:http, no pooling) and parses the response as SSE with eventsource-parser,
 * feeding it through a streaming UTF-8 decoder so the client never splits a character itself.
 */
export function openStream (url: string, headers: Record<string, string> = {}, method = 'GET'): Promise<OpenStream> {
  return new Promise((resolve, reject) => {
    const { hostname, port, pathname, search } = new URL(url)
    const sentAt = performance.now()
    const req = request({ hostname, port, path: pathname + search, method, headers, agent: false }, res => {
      const headersAt = performance.now()
      const chunks: OpenStream['chunks'] = []
      const events: ParsedEvent[] = []
      const comments: string[] = []
      const decoder = new TextDecoder('utf-8', { fatal: true })
      const parser = createParser({
        onEvent: e => { events.push({ event: e.event, id: e.id, data: e.data, at: performance.now() }) },
        onComment: c => { comments.push(c) }
      })
      let text = ''
      let finished = false
      const waiters: Array<() => void> = []
      const wake = (): void => { for (const w of waiters.splice(0)) w() }
      res.on('data', (bytes: Buffer) => {
        chunks.push({ at: performance.now(), bytes })
        const piece = decoder.decode(bytes, { stream: true })
        text += piece
        parser.feed(piece)
        wake()
      })
      const done = new Promise<void>(resolve => {
        const finish = (): void => { finished = true; wake(); resolve() }
        res.on('end', finish)
        res.on('close', finish)
        res.on('error', () => {})
      })
      resolve({
        req,
        res,
        status: res.statusCode ?? 0,
        headers: res.headers,
        sentAt,
        headersAt,
        chunks,
        events,
        comments,
        raw: () => text,
        done,
        ended: () => finished,
        waitForEvents: async (n, ms = 5000) => {
          const until = performance.now() + ms
          while (events.length < n) {
            if (finished) throw new Error(`stream ended with ${events.length} of ${n} events`)
            const left = until - performance.now()
            if (left <= 0) throw new Error(`only ${events.length} of ${n} events in time`)
            await new Promise<void>(resolve => {
              const timer = setTimeout(resolve, left)
              waiters.push(() => { clearTimeout(timer); resolve() })
            })
          }
        }
      })
    })
    req.on('error', reject)
    req.end()
  })
}

/** Reads a whole SSE response. */
export async function readStream (url: string, headers: Record<string, string> = {}): Promise<OpenStream> {
  const stream = await openStream(url, headers)
  await stream.done
  return stream
}

/** A step of a scripted app response: bytes to write, or a pause in ms. */
export type Step = string | Buffer | number

/** Writes `steps` to `res` with real pauses between them; stops quietly if the connection goes. */
export async function play (res: ServerResponse, steps: Step[]): Promise<void> {
  for (const step of steps) {
    if (res.destroyed) return
    if (typeof step === 'number') await sleep(step)
    else res.write(step)
  }
}

export type Route = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>

/** An app on loopback whose routes tests register as they go. */
export interface ScriptedApp extends TestServer {
  /** Registers `handler` under a fresh path and returns the path (unregistered at `t` teardown). */
  route: (t: { teardown: (fn: () => void) => void }, handler: Route) => string
}

let routeCounter = 0

export async function startScriptedApp (): Promise<ScriptedApp> {
  const routes = new Map<string, Route>()
  const app = await startTestServer(async (req, res) => {
    const path = (req.url as string).split('?')[0] as string
    const handler = routes.get(path)
    if (handler === undefined) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"no route"}')
      return
    }
    await handler(req, res)
  })
  return Object.assign(app, {
    route: (t: { teardown: (fn: () => void) => void }, handler: Route): string => {
      const path = `/r${++routeCounter}`
      routes.set(path, handler)
      t.teardown(() => { routes.delete(path) })
      return path
    }
  })
}

/** Bytes of `text` as UTF-8, cut at byte `at` into two buffers (to split a character). */
export function splitBytes (text: string, at: number): [Buffer, Buffer] {
  const bytes = Buffer.from(text, 'utf8')
  return [bytes.subarray(0, at), bytes.subarray(at)]
}

/** The frame a converted stream (NDJSON, chunks) of run `runId` ends with, after its last event. */
export const doneFrame = (runId: string | undefined): string => `id: ${runId ?? ''}.done\n\n`

/**
 * The three SSE modes: what the app sends for an event with value `v`, and what the caller reads;
 * `converted` streams end with the run's doneFrame.
 */
export const MODES = [
  { name: 'passthrough', headers: { 'content-type': 'text/event-stream' }, accept: undefined, unit: (v: string) => `data: ${v}\n\n`, converted: false },
  { name: 'NDJSON', headers: { 'content-type': 'application/x-ndjson' }, accept: undefined, unit: (v: string) => `${v}\n`, converted: true },
  { name: 'chunks', headers: { 'content-type': 'text/plain' }, accept: 'text/event-stream', unit: (v: string) => v, converted: true }
] as const
export type Mode = typeof MODES[number]
