import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { performance } from 'node:perf_hooks'
import { patient } from './timing.ts'

/**
 * How the receiver answers one attempt:
 * - a number: that status at once (empty body);
 * - an object: that status, with headers / body, after `delayMs`;
 * - `'hang'`: never answer (until `release()` or `close()`);
 * - `'reset'`: reset the TCP connection (RST) once the request has arrived.
 */
export type ReceiverAction =
  | number
  | { status: number, headers?: Record<string, string>, body?: string, delayMs?: number }
  | 'hang'
  | 'reset'

/** One delivery attempt as the receiver saw it. */
export interface ReceivedAttempt {
  /** performance.now() when the request line and headers arrived. */
  readonly arrivedAt: number
  /** performance.now() when the answer was sent, the connection reset, or (for a hung one) the peer went away. */
  endedAt: number | undefined
  readonly method: string
  readonly url: string
  readonly headers: IncomingHttpHeaders
  /** The body exactly as received. */
  readonly body: Buffer
  readonly action: ReceiverAction
}

export interface WebhookReceiver {
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  /** Every attempt, in arrival order (recorded once its body was read). */
  readonly attempts: ReceivedAttempt[]
  /** TCP connections accepted so far (0 proves nothing connected at all). */
  readonly connections: () => number
  /** TCP connections open right now. */
  readonly openConnections: () => number
  /** Resolves once `n` attempts have arrived; rejects after `ms`. */
  waitForAttempts: (n: number, ms?: number) => Promise<ReceivedAttempt[]>
  /** Answers every hung attempt with `status`. */
  release: (status?: number) => void
  close: () => Promise<void>
}

export interface WebhookReceiverOptions {
  /** Called with each attempt once its body was read. */
  onAttempt?: (attempt: ReceivedAttempt) => void
  /** false: `attempts` stays empty (a long run that only counts, through onAttempt; waitForAttempts never resolves). */
  record?: boolean
}

/**
 * A real HTTP server on loopback port 0 that answers attempt i with `script[i]` (the last entry,
 * or `fallback` when the script is empty, for every attempt past its end; a function is asked
 * for each), recording each.
 */
export async function startWebhookReceiver (script: readonly ReceiverAction[] = [], fallback: ReceiverAction | (() => ReceiverAction) = 200,
  options: WebhookReceiverOptions = {}): Promise<WebhookReceiver> {
  const attempts: ReceivedAttempt[] = []
  const held: Array<{ res: ServerResponse, attempt: ReceivedAttempt }> = []
  const sockets = new Set<Socket>()
  const timers = new Set<NodeJS.Timeout>()
  const waiters = new Set<() => void>()
  let connections = 0
  let index = 0

  const answer = (res: ServerResponse, attempt: ReceivedAttempt, status: number, headers: Record<string, string> = {}, body = ''): void => {
    res.once('finish', () => { attempt.endedAt = performance.now() })
    res.writeHead(status, { 'content-type': 'text/plain', ...headers }).end(body)
  }

  const server = createServer((req, res) => {
    const arrivedAt = performance.now()
    // past the script, its last action again; no script: the fallback
    const action = script[index] ?? script[script.length - 1] ?? (typeof fallback === 'function' ? fallback() : fallback)
    index++
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('error', () => {})
    req.on('end', () => {
      const attempt: ReceivedAttempt = {
        arrivedAt, endedAt: undefined, method: req.method as string, url: req.url as string, headers: req.headers, body: Buffer.concat(chunks), action
      }
      if (options.record !== false) attempts.push(attempt)
      options.onAttempt?.(attempt)
      for (const waiter of [...waiters]) waiter()
      if (action === 'hang') {
        held.push({ res, attempt })
        req.socket.once('close', () => { attempt.endedAt ??= performance.now() })
      } else if (action === 'reset') {
        attempt.endedAt = performance.now()
        req.socket.resetAndDestroy()
      } else if (typeof action === 'number') {
        answer(res, attempt, action)
      } else {
        const timer = setTimeout(() => {
          timers.delete(timer)
          answer(res, attempt, action.status, action.headers, action.body)
        }, action.delayMs ?? 0)
        timers.add(timer)
      }
    })
  })
  server.on('connection', (socket: Socket) => {
    connections++
    sockets.add(socket)
    socket.on('error', () => {})
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port

  return {
    port,
    url: `http://127.0.0.1:${port}`,
    attempts,
    connections: () => connections,
    openConnections: () => sockets.size,
    waitForAttempts: async (n, ms = 10_000) => await new Promise((resolve, reject) => {
      const check = (): boolean => {
        if (attempts.length < n) return false
        waiters.delete(onAttempt)
        clearTimeout(timer)
        resolve(attempts.slice(0, n))
        return true
      }
      const onAttempt = (): void => { check() }
      const timer = setTimeout(() => {
        waiters.delete(onAttempt)
        reject(new Error(`expected ${n} webhook attempts, got ${attempts.length}`))
      }, patient(ms))
      waiters.add(onAttempt)
      check()
    }),
    release: (status = 200) => {
      for (const { res, attempt } of held.splice(0)) {
        if (!res.destroyed) answer(res, attempt, status)
      }
    },
    close: async () => {
      for (const timer of timers) clearTimeout(timer)
      for (const socket of sockets) socket.destroy()
      await new Promise(resolve => server.close(resolve))
    }
  }
}

/** A loopback port nothing listens on (it was free a moment ago). */
export { refusedPort as closedPort } from './ports.ts'
