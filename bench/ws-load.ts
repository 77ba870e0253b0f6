import WebSocket from 'ws'
import { eachTick, Latencies, type LoadRequest, type Measurement, summarize } from './load.ts'

/**
 * The WebSocket load generator: `connections` WebSockets to an echo endpoint (the example app's
 * `/ws`, directly or through a proxy), all opened before the clock starts, then for
 * `durationSeconds` either request/response (each connection sends its next message as soon as
 * the echo of the previous one is back: max messages/s) or paced (each connection one message
 * every `intervalMs`, whatever is still in flight: an open loop). Every echo is checked against
 * the message it answers, in order; a lost or altered message, a refused handshake or a socket
 * closed before the end makes the measurement invalid. Latency = round trip, send to echo.
 */
export interface WsLoadOptions {
  readonly connections: number
  readonly durationSeconds: number
  /** 0: request/response, as fast as the echoes come back; > 0: one message per connection every `intervalMs`. */
  readonly intervalMs: number
}

/** Size of every message (a text frame): a realistic small JSON-sized message. */
export const MESSAGE_BYTES = 64
/** How long the echoes still in flight at the end may take before they count as lost. */
const DRAIN_MS = 10_000

/** One connection: its messages in flight (oldest first), what came back, how it ended. */
interface Echoes {
  readonly socket: WebSocket
  readonly index: number
  readonly sent: Array<{ text: string, at: number }>
  seq: number
  ok: number
  /** Echoes that match no message in flight (each stands for the oldest one). */
  wrong: number
  /** Messages whose echo never came while a later one's did. */
  skipped: number
  /** An error or a close the load generator did not ask for. */
  failed: boolean
  closing: boolean
  finished: boolean
  /** Paced mode: when the next message is due (ms into the run). */
  due: number
}

/** Sends the next message: `c<connection>#<seq> ` padded to MESSAGE_BYTES, unique so any mix-up shows. */
function send (c: Echoes): void {
  const text = `c${c.index}#${c.seq++} `.padEnd(MESSAGE_BYTES, '.')
  c.sent.push({ text, at: performance.now() })
  c.socket.send(text)
}

/** Matches an echo with its message in flight; returns the round trip (ms), or undefined when it matches none. */
function receive (c: Echoes, data: WebSocket.RawData, isBinary: boolean): number | undefined {
  const now = performance.now()
  const text = isBinary ? undefined : data.toString()
  const match = c.sent.findIndex(m => m.text === text)
  if (match === -1) { c.wrong++; c.sent.shift(); return undefined }
  c.skipped += match
  c.ok++
  return now - (c.sent.splice(0, match + 1)[match] as { at: number }).at
}

/** Opens one WebSocket (undefined when refused); `status` is 101, a refused handshake's status, or 0 (no answer). */
function open (url: string, headers: Record<string, string>): Promise<{ socket: WebSocket | undefined, status: number }> {
  return new Promise(resolve => {
    let status = 0
    const socket = new WebSocket(url, { headers, perMessageDeflate: false, handshakeTimeout: 10_000 })
    socket.once('open', () => { resolve({ socket, status: 101 }) })
    socket.once('unexpected-response', (_req, res) => { status = res.statusCode ?? 0; res.resume(); socket.terminate() })
    // stays on: an error after the open (resolve is a no-op by then) is seen by the load's own listener
    socket.on('error', () => { resolve({ socket: undefined, status }) })
  })
}

async function close (c: Echoes): Promise<void> {
  if (c.socket.readyState === WebSocket.CLOSED) return
  c.closing = true
  await new Promise<void>(resolve => {
    const timer = setTimeout(() => { c.socket.terminate() }, 2_000)
    c.socket.once('close', () => { clearTimeout(timer); resolve() })
    c.socket.close(1000)
  })
}

/** Runs the connections; `rps` is correct echoes per second over the run, latencies are round trips. */
export async function runWebSockets (request: LoadRequest, options: WsLoadOptions): Promise<Measurement> {
  const paced = options.intervalMs > 0
  const opened = await Promise.all(Array.from({ length: options.connections }, async () => await open(request.url.replace(/^http/, 'ws'), request.headers)))
  const statusCodes: Record<string, number> = {}
  for (const o of opened) statusCodes[o.status] = (statusCodes[o.status] ?? 0) + 1
  const refused = opened.filter(o => o.socket === undefined)
  const sockets = opened.flatMap(o => o.socket === undefined ? [] : [o.socket])
  // a socket that closed while the others were still opening is a failure too
  const closedEarly = sockets.filter(s => s.readyState !== WebSocket.OPEN)
  for (const socket of closedEarly) socket.terminate()
  const connections: Echoes[] = sockets.filter(s => s.readyState === WebSocket.OPEN).map((socket, index) =>
    ({ socket, index, sent: [], seq: 0, ok: 0, wrong: 0, skipped: 0, failed: false, closing: false, finished: false, due: Math.random() * options.intervalMs }))

  const latencies = new Latencies()
  const startedAt = performance.now()
  const deadline = startedAt + options.durationSeconds * 1000
  let sendingOver = false
  let finishedCount = 0
  let allFinished: () => void = () => {}
  const finishedAll = new Promise<void>(resolve => { allFinished = resolve })
  const finish = (c: Echoes): void => {
    if (c.finished) return
    c.finished = true
    if (++finishedCount === connections.length) allFinished()
  }
  for (const c of connections) {
    c.socket.on('message', (data, isBinary) => {
      const roundTrip = receive(c, data, isBinary)
      if (roundTrip !== undefined) latencies.push(roundTrip)
      if (!paced && performance.now() < deadline) send(c)
      else if (!paced || (sendingOver && c.sent.length === 0)) finish(c)
    })
    c.socket.on('error', () => { c.failed = true })
    c.socket.on('close', () => { c.failed ||= !c.closing; finish(c) })
  }
  if (connections.length === 0) allFinished()
  const drainTimer = setTimeout(allFinished, options.durationSeconds * 1000 + DRAIN_MS)
  if (paced) {
    // one timer for every connection (not one each): every ~1 ms, whatever is due goes out
    await eachTick(options.durationSeconds, elapsedMs => {
      for (const c of connections) for (; !c.finished && c.due <= elapsedMs; c.due += options.intervalMs) send(c)
    })
    sendingOver = true
    for (const c of connections) if (c.sent.length === 0) finish(c)
  } else {
    for (const c of connections) send(c)
  }
  await finishedAll
  const elapsedSeconds = (performance.now() - startedAt) / 1000
  clearTimeout(drainTimer)
  const total = (count: (c: Echoes) => number): number => connections.reduce((sum, c) => sum + count(c), 0)
  const [ok, wrong, lost] = [total(c => c.ok), total(c => c.wrong), total(c => c.skipped + c.sent.length)]
  const failedSockets = refused.length + closedEarly.length + connections.filter(c => c.failed).length
  await Promise.all(connections.map(close))
  const measured = summarize(latencies, {
    ok,
    errors: failedSockets + wrong + lost,
    timeouts: 0,
    non2xx: refused.filter(o => o.status !== 0).length,
    statusCodes,
    durationSeconds: elapsedSeconds,
    connections: options.connections,
    ...(paced ? { targetRate: options.connections * 1000 / options.intervalMs } : {})
  })
  const extra = { messagesPerConnection: connections.length === 0 ? 0 : ok / connections.length, lostMessages: lost, wrongMessages: wrong, failedSockets }
  return { ...measured, extra }
}
