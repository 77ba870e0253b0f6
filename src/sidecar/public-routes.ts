import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Logger } from 'pino'
import { RouteNotFoundError, SIDECAR_INTERNAL } from '../errors.ts'
import { answerClientError, sendError, writeRawError } from '../shared/http-answers.ts'
import { runIdFor } from '../call/run-id.ts'

/** The handlers the public port routes to. */
export interface PublicHandlers {
  /** `/v4/{project}/{app}/…`: the invoke pipeline. */
  readonly invoke: (req: IncomingMessage, res: ServerResponse) => void
  /** `/v2/…`: reads forwarded to the build store. */
  readonly management: (req: IncomingMessage, res: ServerResponse) => void
  /** A WebSocket upgrade on `/v4/…`. */
  readonly upgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void
  readonly logger: Logger
  /** Time a caller has to send a request's headers. */
  readonly headersTimeoutMs: number
}

/**
 * The public listener and its route table: `/v4/…` calls and upgrades, `/v2/…` reads, and 404
 * for anything else; a request Node's parser refuses gets a JSON error.
 */
export function createPublicServer (handlers: PublicHandlers): Server {
  const { invoke, management, upgrade, logger, headersTimeoutMs } = handlers
  // Node checks the headers timer every connectionsCheckingInterval (30 s by default): check a short one more often
  const server = createServer({
    keepAliveTimeout: 65_000, headersTimeout: headersTimeoutMs, requestTimeout: 0, connectionsCheckingInterval: Math.min(30_000, Math.max(50, headersTimeoutMs / 4))
  }, (req, res) => {
    const url = req.url as string
    if (url.startsWith('/v4/')) invoke(req, res)
    else if (url.startsWith('/v2/') || url === '/v2' || url.startsWith('/v2?')) management(req, res)
    else sendError(res, new RouteNotFoundError(), { runId: runIdFor(req.headers['x-request-id']), logger, internal: SIDECAR_INTERNAL })
  })
  server.on('upgrade', (req, socket, head) => {
    if ((req.url as string).startsWith('/v4/')) {
      upgrade(req, socket, head)
    } else {
      socket.on('error', () => {})
      writeRawError(socket, new RouteNotFoundError(), runIdFor(req.headers['x-request-id']))
    }
  })
  server.on('clientError', answerClientError)
  return server
}
