import { connect, type Socket } from 'node:net'
import { send } from '../helpers/http-client.ts'
import { type Harness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'

/** One HTTP/1.1 response parsed from raw bytes, with its exact framing checked. */
export interface RawResponse {
  status: number
  reason: string
  /** Lower-case names; a repeated header keeps its last value. */
  headers: Record<string, string>
  body: Buffer
  text: string
}

/** What a raw exchange saw: every byte read, the responses in them, and how the connection ended. */
export interface Exchange {
  bytes: Buffer
  responses: RawResponse[]
  /** Bytes after the last complete response (a well-behaved server leaves none). */
  rest: Buffer
  /** The server closed (or reset) the connection. */
  closed: boolean
  /** A socket error code (ECONNRESET, EPIPE), when there was one. */
  error: string | undefined
  /** Nothing ended the exchange before `ms`. */
  timedOut: boolean
  /** Milliseconds from connect to the end of the exchange. */
  elapsedMs: number
  /** Why the bytes read are not well-formed HTTP/1.1 responses, when they are not. */
  malformed: string | undefined
}

const STATUS_LINE = /^HTTP\/1\.1 (\d{3}) ([^\r\n]*)$/
const HEADER_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$/

/**
 * Parses consecutive HTTP/1.1 responses; throws on anything that is not well-formed (bad status
 * line, bad header line, a body shorter than its Content-Length, bad chunk framing). A response
 * whose body is not yet complete is left in `rest`.
 */
export function parseResponses (bytes: Buffer, closed: boolean): { responses: RawResponse[], rest: Buffer } {
  const responses: RawResponse[] = []
  let at = 0
  while (at < bytes.length) {
    const end = bytes.indexOf('\r\n\r\n', at)
    if (end === -1) break
    const lines = bytes.subarray(at, end).toString('latin1').split('\r\n')
    const statusMatch = STATUS_LINE.exec(lines[0] as string)
    if (statusMatch === null) throw new Error(`not a status line: ${JSON.stringify(lines[0])}`)
    const headers: Record<string, string> = {}
    for (const line of lines.slice(1)) {
      const match = HEADER_LINE.exec(line)
      if (match === null) throw new Error(`not a header line: ${JSON.stringify(line)}`)
      headers[(match[1] as string).toLowerCase()] = match[2] as string
    }
    const status = Number(statusMatch[1])
    let bodyStart = end + 4
    let body: Buffer
    if (status === 204 || status === 304 || (status >= 100 && status < 200)) {
      body = Buffer.alloc(0)
    } else if (headers['transfer-encoding'] !== undefined) {
      if (headers['transfer-encoding'].toLowerCase() !== 'chunked') throw new Error(`unexpected transfer-encoding ${headers['transfer-encoding']}`)
      const chunks: Buffer[] = []
      let complete = false
      while (true) {
        const lineEnd = bytes.indexOf('\r\n', bodyStart)
        if (lineEnd === -1) break
        const sizeText = bytes.subarray(bodyStart, lineEnd).toString('latin1')
        if (!/^[0-9a-fA-F]+$/.test(sizeText)) throw new Error(`bad chunk size ${JSON.stringify(sizeText)}`)
        const size = parseInt(sizeText, 16)
        if (size === 0) {
          if (bytes.length < lineEnd + 4) break
          if (bytes.subarray(lineEnd + 2, lineEnd + 4).toString('latin1') !== '\r\n') throw new Error('trailers are not expected')
          bodyStart = lineEnd + 4
          complete = true
          break
        }
        if (bytes.length < lineEnd + 2 + size + 2) break
        chunks.push(bytes.subarray(lineEnd + 2, lineEnd + 2 + size))
        if (bytes.subarray(lineEnd + 2 + size, lineEnd + 4 + size).toString('latin1') !== '\r\n') throw new Error('chunk not followed by CRLF')
        bodyStart = lineEnd + 4 + size
      }
      if (!complete) break
      body = Buffer.concat(chunks)
      at = bodyStart
      responses.push({ status, reason: statusMatch[2] as string, headers, body, text: body.toString('utf8') })
      continue
    } else if (headers['content-length'] !== undefined) {
      if (!/^\d+$/.test(headers['content-length'])) throw new Error(`bad content-length ${headers['content-length']}`)
      const length = Number(headers['content-length'])
      if (bytes.length < bodyStart + length) {
        if (closed) throw new Error(`body shorter than its content-length ${length}`)
        break
      }
      body = bytes.subarray(bodyStart, bodyStart + length)
      bodyStart += length
    } else {
      if (!closed) break
      body = bytes.subarray(bodyStart)
      bodyStart = bytes.length
    }
    at = bodyStart
    responses.push({ status, reason: statusMatch[2] as string, headers, body, text: body.toString('utf8') })
  }
  return { responses, rest: bytes.subarray(at) }
}

export interface ExchangeOptions {
  /** Give up (and destroy the socket) after this long; default 3000 ms. */
  ms?: number
  /** Resolve as soon as this many complete responses arrived (default: wait for the close). */
  responses?: number
  /** Wait this long between writes of the parts of `payload`. */
  gapMs?: number
  /** Stop writing as soon as the server answers (for payloads the server refuses half-way). */
  stopWhenAnswered?: boolean
}

/**
 * Writes `payload` (one buffer, or parts written in turn) to the sidecar over a raw socket and
 * collects everything read until the server closes, `options.responses` responses arrived, or
 * `options.ms` passed. Never rejects: resets and broken pipes are part of the answer.
 */
export function exchange (port: number, payload: string | Buffer | Array<string | Buffer>, options: ExchangeOptions = {}): Promise<Exchange> {
  const parts = (Array.isArray(payload) ? payload : [payload]).map(part => typeof part === 'string' ? Buffer.from(part, 'latin1') : part)
  const started = Date.now()
  return new Promise(resolve => {
    const socket: Socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    let error: string | undefined
    let settled = false
    let answered = false
    const finish = (closed: boolean, timedOut: boolean): void => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      socket.destroy()
      const bytes = Buffer.concat(chunks)
      let parsed: ReturnType<typeof parseResponses> = { responses: [], rest: bytes }
      let malformed: string | undefined
      try { parsed = parseResponses(bytes, closed) } catch (err) { malformed = (err as Error).message }
      resolve({ bytes, responses: parsed.responses, rest: parsed.rest, closed, error, timedOut, elapsedMs: Date.now() - started, malformed })
    }
    const timer = setTimeout(() => { finish(false, true) }, options.ms ?? 3000)
    socket.on('data', (chunk: Buffer) => {
      answered = true
      chunks.push(chunk)
      if (options.responses !== undefined) {
        let count = 0
        try { count = parseResponses(Buffer.concat(chunks), false).responses.length } catch { count = 0 }
        if (count >= options.responses) finish(false, false)
      }
    })
    socket.on('error', (err: NodeJS.ErrnoException) => { error = err.code ?? err.message })
    socket.on('close', () => { finish(true, false) })
    socket.on('connect', () => { void writeParts() })
    async function writeParts (): Promise<void> {
      for (const [index, part] of parts.entries()) {
        if (settled || socket.destroyed || (options.stopWhenAnswered === true && answered)) return
        if (index > 0 && options.gapMs !== undefined) await sleep(options.gapMs)
        if (settled || socket.destroyed || (options.stopWhenAnswered === true && answered)) return
        if (!socket.write(part)) await new Promise(resolve => { socket.once('drain', resolve); socket.once('close', resolve) })
      }
    }
  })
}

/** A JSON `{"message": …}` body of the sidecar's own: returns the message, throws on any other shape. */
export function messageOf (response: RawResponse): string {
  const parsed = JSON.parse(response.text) as unknown
  if (typeof parsed !== 'object' || parsed === null || Object.keys(parsed).length !== 1 || typeof (parsed as { message?: unknown }).message !== 'string') {
    throw new Error(`not a {"message"} body: ${response.text}`)
  }
  return (parsed as { message: string }).message
}

/** The sidecar's answer to anything its HTTP parser refuses. */
export const MALFORMED = '{"message":"malformed request"}'

/** True while the sidecar's admin port answers /livez 200. */
export async function livez (h: Harness): Promise<boolean> {
  const r = await send(`${h.admin}/livez`)
  return r.status === 200 && r.text === '{"status":"ok"}'
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

/** A GET with a token and `Connection: close`, as raw bytes. */
export function rawGet (target: string | Buffer, token: string, extraHeaders = ''): Buffer {
  return Buffer.concat([
    Buffer.from('GET ', 'latin1'),
    typeof target === 'string' ? Buffer.from(target, 'latin1') : target,
    Buffer.from(` HTTP/1.1\r\nHost: hostile.test\r\nAuthorization: Bearer ${token}\r\n${extraHeaders}Connection: close\r\n\r\n`, 'latin1')
  ])
}

/** The app behind the attacked sidecar: answers `{"url": <target>}` and pushes every request target it receives onto `seen`, in arrival order. */
export async function startTargetEchoApp (seen: string[]): Promise<TestServer> {
  const app = await startTestServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ url: req.url }))
  })
  app.server.on('request', req => { seen.push(req.url as string) })
  return app
}
