import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Pool } from 'undici'
import { MethodNotAllowedError, StoreUnreachableError } from '../errors.ts'
import { AppResponseRelay } from '../respond/app-response-relay.ts'
import type { CallRecorder } from '../call/call-record.ts'
import { HttpCall } from '../call/http-call.ts'
import { appRequestHeaders } from '../call/forward-headers.ts'
import { passthroughSink } from '../respond/response-sinks.ts'

export interface ManagementDeps extends CallRecorder {
  readonly store: Pool
  /** The path prefix of STORE_URL ('' for none). */
  readonly basePath: string
  /** STORE_URL, as the log line names it when the store cannot be reached. */
  readonly storeUrl: string
}

const READ_ONLY = 'GET, HEAD'
const READ_HEADER_RULES = { dropAuthorization: false, dropAcceptEncoding: false, upgrade: false }

/** `GET|HEAD /v2/…`: forwarded to the build store with the same path, query and Authorization. */
export function createManagementHandler (deps: ManagementDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const storeUrl = deps.storeUrl
  const unreachable = (detail: string): StoreUnreachableError => new StoreUnreachableError(detail, storeUrl)
  return function handleManagement (req, res) {
    const call = new HttpCall(deps, 'management', req, res)
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      call.answer(new MethodNotAllowedError(READ_ONLY))
      return
    }
    const relay = new AppResponseRelay(call, passthroughSink, unreachable)
    call.onAbort(relay)
    deps.store.dispatch({
      method: req.method,
      path: deps.basePath + (req.url as string),
      headers: appRequestHeaders(req, call.runId, READ_HEADER_RULES),
      body: null
    }, relay)
  }
}
