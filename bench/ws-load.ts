import WebSocket from 'ws'
import { Latencies, type LoadRequest, type Measurement, summarize } from './load.ts'

/**
 * The WebSocket load generator: `connections` WebSockets to an echo endpoint (the example app's
 * `/ws`, directly or through a proxy), all opened before the clock starts, then for
 * `durationSeconds` either request/response (each connection sends its next message as soon as
 * the echo of the previous one is back: max messages/s) or paced (each connection one message
 * every `intervalMs`, whatever is still in flight: an open loop). Every echo is checked against
 * the message it answers, in order; a lost or altered message, a refused handshake or a socket
 * closed before the end makes the measurement invalid. Latency = round trip, from the send to the
 * echo's arrival.
 */
export interface WsLoadOptions {
  readonly connections: number
  readonly durationSeconds: number
  /** 0: request/response, as fast as the echoes come back; > 0: one message per connection every `intervalMs`. */
  readonly intervalMs: number
}

/** Size of every message (a text frame): a realistic small JSON-sized message. */
export const MESSAGE_BYTES = 64
const FILLER = '.'.repeat(MESSAGE_BYTES)
/** How long the echoes still in flight at the end may take before they count as lost. */
const DRAIN_MS = 10_000
const HANDSHAKE_TIMEOUT_MS = 10_000
const CLOSE_TIMEOUT_MS = 2_000

/** `c<connection>#<seq> ` padded to MESSAGE_BYTES: unique per connection and message, so any mix-up shows. */
function message (connection: number, seq: number): string {
  const head = `c${connection}#${seq} `
  return head + FILLER.slice(head.length)
}

/** One connection's messages in flight (oldest first), what it got back, and how it ended. */
class EchoConnection {
  readonly sent: string[] = []
  readonly sentAt: number[] = []
  head = 0
  seq = 0
  ok = 0
  wrong = 0
  /** Messages whose echo never came while a later one's did. */
  skipped = 0
  /** An error or a close the load generator did not ask for. */
  failed = false
  closing = false
  finished = false
  /** Paced mode: when the next message is due (performance.now() ms). */
  due = 0

  constructor (readonly index: number, readonly socket: WebSocket) {}

  get inFlight (): number { return this.sent.length - this.head }

  send (): void {
    const text = message(this.index, this.seq++)
    this.sent.push(text)
    this.sentAt.push(performance.now())
    this.socket.send(text)
  }

  /**
   * Checks an echo against the oldest message in flight; returns its round trip (ms), or
   * undefined when it is wrong. An echo of a later message means the ones before it were lost.
   */
  receive (data: WebSocket.RawData, isBinary: boolean): number | undefined {
    const receivedAt = performance.now()
    const text = isBinary ? undefined : data.toString()
    let match = this.head
    while (match < this.sent.length && this.sent[match] !== text) match++
    if (match === this.sent.length) {
      // altered (or never sent): it stands for the oldest message in flight
      this.wrong++
      if (this.head < this.sent.length) this.consume(this.head + 1)
      return undefined
    }
    const sentAt = this.sentAt[match] as number
    this.skipped += match - this.head
    this.consume(match + 1)
    this.ok++
    return receivedAt - sentAt
  }

  /** Drops the messages in flight before `end`. */
  private consume (end: number): void {
    this.head = end
    if (this.head === this.sent.length) {
      this.sent.length = 0
      this.sentAt.length = 0
      this.head = 0
    }
  }
}

/** The ws URL of a LoadRequest (`http:` → `ws:`), so scenarios describe WebSocket targets like any other. */
export function webSocketUrl (request: LoadRequest): string {
  const url = new URL(request.url)
  if (url.protocol === 'http:') url.protocol = 'ws:'
  else if (url.protocol === 'https:') url.protocol = 'wss:'
  return url.href
}

/** Opens one WebSocket (undefined when refused); `status` is 101, the status of a refused handshake, or 0 (no answer). */
function open (url: string, headers: Record<string, string>): Promise<{ socket: WebSocket | undefined, status: number }> {
  return new Promise(resolve => {
    let status = 0
    const socket = new WebSocket(url, { headers, perMessageDeflate: false, handshakeTimeout: HANDSHAKE_TIMEOUT_MS })
    socket.once('open', () => { resolve({ socket, status: 101 }) })
    socket.once('unexpected-response', (_req, res) => {
      status = res.statusCode ?? 0
      res.resume()
      socket.terminate()
    })
    // stays on: an error after the open (resolve is a no-op by then) is seen by the load's own listener
    socket.on('error', () => { resolve({ socket: undefined, status }) })
  })
}

async function close (c: EchoConnection): Promise<void> {
  const socket = c.socket
  if (socket.readyState === WebSocket.CLOSED) return
  c.closing = true
  await new Promise<void>(resolve => {
    const timer = setTimeout(() => { socket.terminate() }, CLOSE_TIMEOUT_MS)
    socket.once('close', () => { clearTimeout(timer); resolve() })
    socket.close(1000)
  })
}

/** Runs the connections; `rps` is correct echoes per second over the run, latencies are round trips. */
export async function runWebSockets (request: LoadRequest, options: WsLoadOptions): Promise<Measurement> {
  const url = webSocketUrl(request)
  const paced = options.intervalMs > 0
  const opened = await Promise.all(Array.from({ length: options.connections }, async () => await open(url, request.headers)))
  const statusCodes: Record<string, number> = {}
  for (const o of opened) statusCodes[o.status] = (statusCodes[o.status] ?? 0) + 1
  const refused = opened.filter(o => o.socket === undefined)
  const sockets = opened.map(o => o.socket).filter((s): s is WebSocket => s !== undefined)
  // a socket that closed while the others were still opening is a failure too
  const closedEarly = sockets.filter(s => s.readyState !== WebSocket.OPEN)
  for (const socket of closedEarly) socket.terminate()
  const connections = sockets.filter(s => s.readyState === WebSocket.OPEN).map((socket, i) => new EchoConnection(i, socket))

  const latencies = new Latencies()
  const startedAt = performance.now()
  const deadline = startedAt + options.durationSeconds * 1000
  let sendingOver = false
  let finishedCount = 0
  let allFinished: () => void = () => {}
  const finishedAll = new Promise<void>(resolve => { allFinished = resolve })
  const finish = (c: EchoConnection): void => {
    if (c.finished) return
    c.finished = true
    if (++finishedCount === connections.length) allFinished()
  }

  for (const c of connections) {
    c.socket.on('message', (data, isBinary) => {
      const roundTrip = c.receive(data, isBinary)
      if (roundTrip !== undefined) latencies.push(roundTrip)
      if (paced) {
        if (sendingOver && c.inFlight === 0) finish(c)
      } else if (performance.now() < deadline) {
        c.send()
      } else {
        finish(c)
      }
    })
    c.socket.on('error', () => { c.failed = true })
    c.socket.on('close', () => {
      if (!c.closing) c.failed = true
      finish(c)
    })
  }
  if (connections.length === 0) allFinished()

  let ticker: NodeJS.Timeout | undefined
  if (paced) {
    // One timer for every connection (not one each): every ~1 ms, whatever is due goes out.
    for (const c of connections) c.due = startedAt + Math.random() * options.intervalMs
    const tick = (): void => {
      const now = performance.now()
      const until = Math.min(now, deadline)
      for (const c of connections) {
        if (c.finished) continue
        while (c.due <= until) {
          c.send()
          c.due += options.intervalMs
        }
      }
      if (now >= deadline) {
        sendingOver = true
        clearInterval(ticker)
        for (const c of connections) if (c.inFlight === 0) finish(c)
      }
    }
    ticker = setInterval(tick, 1)
  } else {
    for (const c of connections) c.send()
  }

  const drainTimer = setTimeout(allFinished, options.durationSeconds * 1000 + DRAIN_MS)
  await finishedAll
  const elapsedSeconds = (performance.now() - startedAt) / 1000
  clearTimeout(drainTimer)
  clearInterval(ticker)
  const lost = connections.reduce((total, c) => total + c.skipped + c.inFlight, 0)
  const ok = connections.reduce((total, c) => total + c.ok, 0)
  const wrong = connections.reduce((total, c) => total + c.wrong, 0)
  const closed = connections.filter(c => c.failed).length
  await Promise.all(connections.map(close))

  const measured = summarize(latencies.values.subarray(0, latencies.count), {
    ok,
    errors: refused.length + closedEarly.length + closed + wrong + lost,
    timeouts: 0,
    non2xx: refused.filter(o => o.status !== 0).length,
    statusCodes,
    durationSeconds: elapsedSeconds,
    connections: options.connections,
    ...(paced ? { targetRate: options.connections * 1000 / options.intervalMs } : {})
  })
  return {
    ...measured,
    extra: {
      messagesPerConnection: connections.length === 0 ? 0 : ok / connections.length,
      lostMessages: lost,
      wrongMessages: wrong,
      failedSockets: refused.length + closedEarly.length + closed
    }
  }
}
