import type { IncomingMessage, ServerResponse } from 'node:http'
import { SidecarError } from '../errors.ts'

const INTERNAL = new SidecarError(500, 'SIDECAR_INTERNAL', 'internal error')

/**
 * Answers with the sidecar's own JSON error. When the response has already begun there is no
 * status left to send, so the connection is cut instead. `closeConnection` is for a caller
 * whose unread request body must not be read (413).
 */
export function sendError (res: ServerResponse, runId: string | undefined, error: unknown, closeConnection = false): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  const known = error instanceof SidecarError ? error : INTERNAL
  const body = known.body()
  res.statusCode = known.status
  res.setHeader('content-type', 'application/json; charset=utf-8')
  res.setHeader('content-length', Buffer.byteLength(body))
  if (runId !== undefined) res.setHeader('x-request-id', runId)
  if (known.headers !== undefined) {
    for (const name in known.headers) res.setHeader(name, known.headers[name] as string)
  }
  if (closeConnection) res.setHeader('connection', 'close')
  else if (!res.req.complete) limitUnreadBody(res.req)
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
