import { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse, STATUS_CODES } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Logger } from 'pino'
import { HeadersTimeoutError, HeadersTooLargeError, MalformedHttpError, SidecarError } from '../errors.ts'
import type { AnswerOut } from './answer-writer.ts'

// Every status and JSON error the sidecar and the build store answer themselves is written here.

const JSON_TYPE = 'application/json; charset=utf-8'

/** What an answer needs besides the error: the run id to echo, and where an unexpected error is logged. */
export interface AnswerContext {
  readonly runId?: string | undefined
  /** An error that is not a SidecarError is logged here once, with its code and stack, and answered 500. */
  readonly logger: Logger
  /** The 500 answer for an unexpected error (the sidecar's or the store's). */
  readonly internal: SidecarError
}

/** Answers `status` with a JSON text already serialised. */
export function sendJson (res: AnswerOut, status: number, json: string, headers?: Readonly<Record<string, string>>): void {
  res.writeHead(status, headers === undefined
    ? { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(json) }
    : { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(json), ...headers })
  res.end(json)
}

/** The error to answer: a SidecarError as it is; anything else is logged once and becomes the 500. */
export function knownError (error: unknown, ctx: AnswerContext): SidecarError {
  if (error instanceof SidecarError) return error
  const err = error as NodeJS.ErrnoException
  ctx.logger.error({ err, code: err?.code, runId: ctx.runId }, 'request failed')
  return ctx.internal
}

/**
 * Answers with a JSON error `{"message": …}`, `X-Request-Id` when there is a run id. When the
 * response has already begun there is no status left to send, so the connection is cut instead.
 */
export function sendError (res: AnswerOut, error: unknown, ctx: AnswerContext): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  const known = knownError(error, ctx)
  const body = known.body()
  const headers: OutgoingHttpHeaders = { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(body) }
  if (ctx.runId !== undefined) headers['x-request-id'] = ctx.runId
  if (known.headers !== undefined) Object.assign(headers, known.headers)
  // a 413's body is not read on, even when it has all arrived
  if (known.status === 413) headers.connection = 'close'
  else if (!res.req.complete) limitUnreadBody(res.req)
  res.writeHead(known.status, headers)
  res.end(body)
}

/** How long the rest of a refused request's body may take to arrive before its connection is cut. */
export const UNREAD_BODY_MS = 1000

/**
 * Node reads a refused request's body to its end before the connection serves another request:
 * a body that arrived with its headers costs nothing, but a trickled one would hold the
 * connection open at the caller's pace, so it gets UNREAD_BODY_MS.
 */
function limitUnreadBody (req: IncomingMessage): void {
  const timer = setTimeout(() => { req.socket.destroy() }, UNREAD_BODY_MS)
  req.once('close', () => { clearTimeout(timer) })
}

/** The same JSON error written on a raw socket (a refused upgrade, a request the parser refused), then the socket closes. */
export function writeRawError (socket: Duplex, error: SidecarError, runId?: string): void {
  closeOnceAnswered(socket)
  const body = error.body()
  let head = `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? ''}\r\ncontent-type: ${JSON_TYPE}\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\n`
  if (runId !== undefined) head += `x-request-id: ${runId}\r\n`
  if (error.headers !== undefined) {
    for (const name in error.headers) head += `${name}: ${error.headers[name] as string}\r\n`
  }
  socket.end(`${head}connection: close\r\n\r\n${body}`)
}

/** How long a raw answer may take to reach a caller that does not read it. */
const RAW_FLUSH_MS = 10_000

/**
 * A raw answer's socket closes once the answer is written: ending the write side alone leaves it
 * open while unread bytes from the caller sit in it (holding a drain, or a slot).
 */
export function closeOnceAnswered (socket: Duplex): void {
  socket.once('finish', () => { socket.destroy() })
  const timed = socket as Duplex & { setTimeout?: (ms: number, callback: () => void) => void }
  timed.setTimeout?.(RAW_FLUSH_MS, () => { socket.destroy() })
}

/** What Node's HTTP parser or headers timer refused, answered as Node would (431, 408), else 400. */
const CLIENT_ERRORS: Readonly<Record<string, SidecarError>> = {
  HPE_HEADER_OVERFLOW: new HeadersTooLargeError(),
  ERR_HTTP_REQUEST_TIMEOUT: new HeadersTimeoutError()
}
const MALFORMED = new MalformedHttpError()

/**
 * The server's `clientError`: a request its parser refused gets a JSON error and the connection
 * closes. Bytes after a `Connection: close` request belong to no request and are ignored (the
 * connection closes once that request is answered); an answer is never written into a response
 * already under way.
 */
export function answerClientError (error: NodeJS.ErrnoException, socket: Duplex & { _httpMessage?: ServerResponse | null }): void {
  if (error.code === 'HPE_CLOSED_CONNECTION') return
  if (!socket.writable || error.code === 'ECONNRESET' || socket._httpMessage?.headersSent === true) {
    socket.destroy()
    return
  }
  writeRawError(socket, CLIENT_ERRORS[error.code ?? ''] ?? MALFORMED)
}
