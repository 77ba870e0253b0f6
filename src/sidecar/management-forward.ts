import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Pool } from 'undici'
import { MethodNotAllowedError, StoreUnreachableError } from '../errors.ts'
import { AppResponseRelay } from './app-response-relay.ts'
import { type CallRecorder, recordCall } from './call-record.ts'
import { sendError } from './error-response.ts'
import { appRequestHeaders } from './forward-headers.ts'
import { passthroughSink } from './response-sinks.ts'
import { runIdFor } from './run-id.ts'

export interface ManagementDeps extends CallRecorder {
  readonly store: Pool
  /** The path prefix of STORE_URL ('' for none). */
  readonly basePath: string
}

const READ_ONLY = 'GET, HEAD'

/** `GET|HEAD /v2/…`: forwarded to the build store with the same path, query and Authorization. */
export function createManagementHandler (deps: ManagementDeps): (req: IncomingMessage, res: ServerResponse) => void {
  return function handleManagement (req, res) {
    const runId = runIdFor(req.headers['x-request-id'])
    recordCall(deps, 'management', req, res, runId)
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      sendError(res, runId, new MethodNotAllowedError(READ_ONLY))
      return
    }
    const relay = new AppResponseRelay(res, runId, passthroughSink, detail => new StoreUnreachableError(detail))
    res.once('close', () => { if (!res.writableFinished) relay.callerGone() })
    deps.store.dispatch({
      method: req.method,
      path: deps.basePath + (req.url as string),
      headers: appRequestHeaders(req, runId, { dropAuthorization: false, dropAcceptEncoding: false, upgrade: false }),
      body: null
    }, relay)
  }
}
