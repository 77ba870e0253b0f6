import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import { pino } from 'pino'
import { SIDECAR_INTERNAL } from '../../src/errors.ts'
import type { AbortTaker } from '../../src/call/call-record.ts'
import type { CallRoute } from '../../src/call/match-route.ts'
import type { StageCall } from '../../src/call/stage-call.ts'
import { StageFindings } from '../../src/call/stage-findings.ts'
import { AnswerWriter } from '../../src/shared/answer-writer.ts'
import { knownError, sendError } from '../../src/shared/http-answers.ts'
import type { LabelledCounter } from '../../src/shared/metric-contracts.ts'

// A call to test one /v4 stage alone: a real request on a real loopback socket, answered through
// a real ServerResponse, with no sidecar around it (no pipeline, gate, metrics or log line). The
// stage under test gets a StageCall; the test reads what the caller got, byte for byte.

/** What the caller got: undefined when its connection was cut before a whole answer. */
export interface CallerGot {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

export interface FakeCallOptions {
  readonly method?: string
  /** The request target (default `/v4/proj/app/work`). */
  readonly path?: string
  readonly headers?: Readonly<Record<string, string>>
  /** Sent as the request body (with its Content-Length). */
  readonly body?: string | Buffer
  /** What the route stage would have found; by default read from `path`'s `/v4/{project}/{app}/…`. */
  readonly route?: Partial<CallRoute>
}

/** A StageCall over a real request, and what the test needs to drive and read it. */
export interface FakeCall extends StageCall {
  /** The caller's response itself, under the call's writer. */
  readonly res: ServerResponse
  /** Every error the call was answered with (the pipeline's catch, or a stage's own answer). */
  readonly answered: unknown[]
  /** Resolves once the caller has the whole answer, or undefined when its connection was cut. */
  readonly got: Promise<CallerGot | undefined>
  /** The call closes (what closing an HttpCall does): its cleanups run, in the order given. */
  close: () => void
  /** The app request that outlived its caller ended: what the call held is freed now (as CallRecord's outlived()). */
  outlived: () => void
  /** The caller leaves: its socket is destroyed and the call aborts with `reason`. */
  leave: (reason?: Error) => void
}

const logger = pino({ level: 'silent' })

/** A labelled counter that remembers every count, by label: `counts.get('canceled')`. */
export function countingCounter<Label extends string> (): LabelledCounter<Label> & { readonly counts: Map<Label, number> } {
  const counts = new Map<Label, number>()
  return { counts, labels: label => ({ inc: (value = 1) => { counts.set(label, (counts.get(label) ?? 0) + value) } }) }
}

class LoopbackCall extends StageFindings implements FakeCall {
  readonly req: IncomingMessage
  readonly res: ServerResponse
  readonly out: AnswerWriter
  readonly runId: string
  readonly arrivedAt = performance.now()
  route: CallRoute
  readonly answered: unknown[] = []
  readonly got: Promise<CallerGot | undefined>
  /** How long it waited for its slot (waited()). */
  queueMs: number | undefined = undefined
  #outliving = false
  #closed = false
  readonly #cleanups: Array<() => void> = []
  readonly #controller = new AbortController()
  #taker: AbortTaker | undefined

  constructor (req: IncomingMessage, res: ServerResponse, route: CallRoute, got: Promise<CallerGot | undefined>) {
    super()
    this.req = req
    this.res = res
    this.out = new AnswerWriter(req, res)
    this.route = route
    this.got = got
    this.runId = String(req.headers['x-request-id'] ?? 'fake-run')
    // as CallRecord: a caller that leaves aborts the call, unless whoever holds it goes on without it
    res.once('close', () => {
      if (!res.writableFinished) {
        if (this.#taker?.outlivesCaller?.() === true) this.#outliving = true
        else this.abort(new Error('caller gone'))
      }
      if (!this.#outliving) this.close()
    })
  }

  get settled (): boolean { return this.out.writableEnded || (this.res.destroyed && !this.#outliving) }
  get outliving (): boolean { return this.#outliving }
  get signal (): AbortSignal { return this.#controller.signal }

  answer (error: unknown): void {
    this.answered.push(error)
    if (this.settled) return
    const ctx = { runId: this.runId, logger, internal: SIDECAR_INTERNAL }
    sendError(this.out, knownError(error, ctx), ctx)
  }

  abort (reason: Error): void {
    if (this.#controller.signal.aborted) return
    this.#controller.abort(reason)
    this.#taker?.abortFor(reason)
  }

  onAbort (taker: AbortTaker): void {
    this.#taker = taker
    if (this.#controller.signal.aborted) taker.abortFor(this.#controller.signal.reason as Error)
  }

  onClose (free: () => void): void {
    if (this.#closed) free()
    else this.#cleanups.push(free)
  }

  outlive (): void { if (!this.#closed) this.#outliving = true }

  outlived (): void {
    if (!this.#outliving) return
    this.#outliving = false
    this.close()
  }
  waited (ms: number): void { this.queueMs = ms }

  close (): void {
    if (this.#closed) return
    this.#closed = true
    this.inFlight?.leave()
    for (const free of this.#cleanups.splice(0)) free()
  }

  leave (reason: Error = new Error('caller gone')): void {
    this.req.socket.destroy()
    this.abort(reason)
  }
}

/** The route a `/v4/{project}/{app}/{path…}?{query}` target names (no checks: the route stage's are tested on their own). */
function routeOf (path: string, overrides: Partial<CallRoute> | undefined): CallRoute {
  const [target = '', query = ''] = path.split('?', 2)
  const [, , projectId = 'proj', appName = 'app', ...rest] = target.split('/')
  return {
    projectId,
    appName,
    appPath: '/' + rest.join('/'),
    forwardedQuery: query,
    webhookEndpoint: undefined,
    accessToken: undefined,
    async: false,
    ...overrides
  }
}

interface Teardown { teardown: (fn: () => void | Promise<void>) => void }

/**
 * A loopback server that turns each request into a FakeCall; closed with the test. `call()` sends
 * the request and resolves once the server has it (headers read; the body, if any, unread).
 */
export async function fakeCalls (t: Teardown): Promise<(options?: FakeCallOptions) => Promise<FakeCall>> {
  const waiting = new Map<string, (pair: [IncomingMessage, ServerResponse]) => void>()
  const server = createServer((req, res) => {
    const id = req.headers['x-fake-call'] as string
    waiting.get(id)?.([req, res])
    waiting.delete(id)
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  t.teardown(async () => {
    server.closeAllConnections()
    await new Promise(resolve => server.close(resolve))
  })
  let next = 0

  return async function call (options = {}) {
    const id = String(++next)
    const path = options.path ?? '/v4/proj/app/work'
    const arrived = new Promise<[IncomingMessage, ServerResponse]>(resolve => waiting.set(id, resolve))
    const headers: Record<string, string | number> = { ...options.headers, 'x-fake-call': id }
    if (options.body !== undefined) headers['content-length'] = Buffer.byteLength(options.body)
    const got = new Promise<CallerGot | undefined>(resolve => {
      const req = request({ host: '127.0.0.1', port, method: options.method ?? 'POST', path, headers, agent: false }, res => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('end', () => { resolve({ status: res.statusCode as number, headers: res.headers, body: Buffer.concat(chunks).toString() }) })
        res.on('error', () => { resolve(undefined) })
      })
      req.on('error', () => { resolve(undefined) })
      req.end(options.body)
    })
    const [req, res] = await arrived
    return new LoopbackCall(req, res, routeOf(path, options.route), got)
  }
}
