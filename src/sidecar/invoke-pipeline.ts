import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Pool } from 'undici'
import type { SidecarConfig } from '../config/sidecar-config.ts'
import { readBearerToken } from '../auth/bearer-token.ts'
import type { TokenVerifier } from '../auth/token-verifier.ts'
import { DeadlineExceededError, RouteNotFoundError } from '../errors.ts'
import type { ConcurrencyGate, Release } from '../lifecycle/concurrency-gate.ts'
import { AppResponseRelay, CallerGoneError } from './app-response-relay.ts'
import { type CallRecorder, recordCall } from './call-record.ts'
import { sendError } from './error-response.ts'
import { appRequestHeaders } from './forward-headers.ts'
import { type InvokeRoute, parseInvokeRoute, splitQuery, type SplitQuery } from './invoke-route.ts'
import { type RequestBody, requestBodyFor } from './request-body.ts'
import { envelopeSink, passthroughSink, type ResponseSink, type SinkContext } from './response-sinks.ts'
import { runIdFor } from './run-id.ts'
import { createStreamSinks } from '../stream/stream-sinks.ts'
import { parseWebhookEndpoint } from '../webhook/webhook-endpoint.ts'
import type { WebhookSender } from '../webhook/webhook-sender.ts'
import { WebhookTee } from '../webhook/webhook-tee.ts'

function mediaType (contentType: string | undefined): string {
  if (contentType === undefined) return ''
  const semicolon = contentType.indexOf(';')
  return (semicolon === -1 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase()
}

function acceptsEventStream (accept: string | undefined): boolean {
  return accept !== undefined && accept.toLowerCase().includes('text/event-stream')
}

const NO_ROUTE: InvokeRoute = { projectId: '', appName: '', appPath: '/', query: '' }
const NO_QUERY: SplitQuery = { forwarded: '', webhookEndpoint: undefined, accessToken: undefined }

export interface InvokeDeps extends CallRecorder {
  readonly config: SidecarConfig
  /** Undefined when auth is disabled. */
  readonly verifier: TokenVerifier | undefined
  readonly app: Pool
  readonly webhooks: WebhookSender
  readonly gate: ConcurrencyGate
}

/** One `/v4` call as it walks the pipeline. */
interface InvokeCall {
  readonly req: IncomingMessage
  readonly res: ServerResponse
  readonly runId: string
  route: InvokeRoute
  query: SplitQuery
  /** Where to deliver this call's webhook, when it asked for one. */
  webhook: URL | undefined
  /** Set once the call waits in the queue: aborting it gives up the wait. */
  wait: AbortController | undefined
  /** Set once the call is forwarded to the app. */
  relay: AppResponseRelay | undefined
  /** Frees the call's concurrency slot, once it has one. */
  release: Release | undefined
  deadline: NodeJS.Timeout | undefined
}

/**
 * The `/v4/{project}/{app}/{path…}` pipeline, in the SPEC's order of checks:
 * route (404) → auth (401/403) → the request itself (400 webhookEndpoint, 413 body) →
 * the concurrency gate (503 queue full; waits for the app's first readiness) → the app (502),
 * with the response teed to the webhook sender when the call asked for one, and the whole
 * bounded by DEADLINE_SECONDS (504, or an error event on a stream).
 */
export function createInvokeHandler (deps: InvokeDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const { config } = deps
  const basePath = config.appUrl.pathname.replace(/\/$/, '')
  const streams = createStreamSinks({ metrics: deps.metrics, heartbeatMs: config.sseHeartbeatSeconds * 1000 })

  function matchRoute (call: InvokeCall): void {
    const route = parseInvokeRoute(call.req.url as string)
    if (route === undefined ||
        (config.projectId !== undefined && route.projectId !== config.projectId) ||
        (config.appName !== undefined && route.appName !== config.appName)) {
      throw new RouteNotFoundError('no such app')
    }
    call.route = route
    call.query = splitQuery(route.query, config.allowQueryToken)
  }

  function authorize (call: InvokeCall): Promise<void> | undefined {
    if (deps.verifier === undefined) return undefined
    const token = readBearerToken(call.req.headers, call.query.accessToken)
    return deps.verifier.authorize(token, call.route.projectId)
  }

  function checkRequest (call: InvokeCall): void {
    const endpoint = call.query.webhookEndpoint
    call.webhook = endpoint === undefined ? undefined : parseWebhookEndpoint(endpoint)
  }

  function forwardToApp (call: InvokeCall, body: RequestBody): void {
    const { req, res } = call
    const tee = call.webhook === undefined ? undefined : teeFor(call, call.webhook)
    const relay = new AppResponseRelay(res, call.runId, chooseSink, undefined, tee)
    call.relay = relay
    const headers = appRequestHeaders(req, call.runId, {
      dropAuthorization: deps.verifier !== undefined,
      dropAcceptEncoding: config.runtime === 'cortex',
      upgrade: false
    })
    const query = call.query.forwarded
    relay.forwardedAt = performance.now()
    tee?.forwarded()
    deps.app.dispatch({
      method: req.method as string,
      path: basePath + call.route.appPath + (query === '' ? '' : '?' + query),
      headers,
      body
    }, relay)
  }

  function teeFor (call: InvokeCall, url: URL): WebhookTee {
    const secret = call.req.headers['x-webhook-secret']
    return new WebhookTee(url, call.runId, typeof secret === 'string' && secret !== '' ? secret : undefined,
      config.webhookMaxBodyBytes, deps.webhooks)
  }

  /** The SPEC's response table: three kinds of stream, then the runtime's rule. */
  function chooseSink (ctx: SinkContext, status: number, headers: IncomingHttpHeaders): ResponseSink {
    const hasBody = status >= 200 && status < 300 && status !== 204 && status !== 205 && ctx.res.req.method !== 'HEAD'
    const readable = headers['content-encoding'] === undefined || headers['content-encoding'] === 'identity'
    if (hasBody && readable) {
      const type = mediaType(headers['content-type'])
      if (type === 'text/event-stream') return streams.eventStream(ctx)
      if (type === 'application/x-ndjson' || type === 'application/jsonl') return streams.ndjson(ctx)
      if (headers['content-length'] === undefined && acceptsEventStream(ctx.res.req.headers.accept)) return streams.chunks(ctx)
      if (config.runtime === 'cortex') return envelopeSink(ctx, status, headers)
    }
    return passthroughSink(ctx, status, headers)
  }

  /** Queues for a slot; the wait ends early if the caller leaves or the deadline passes. */
  function waitForSlot (call: InvokeCall): Promise<Release> {
    const wait = new AbortController()
    const callerGone = (): void => { wait.abort(new CallerGoneError()) }
    call.wait = wait
    call.res.once('close', callerGone)
    return deps.gate.acquire(wait.signal).finally(() => {
      call.res.off('close', callerGone)
      call.wait = undefined
    })
  }

  function expire (call: InvokeCall): void {
    const error = new DeadlineExceededError(config.deadlineSeconds)
    if (call.relay !== undefined) {
      call.relay.expire(error)
    } else {
      call.wait?.abort(error)
      sendError(call.res, call.runId, error)
    }
  }

  async function run (call: InvokeCall): Promise<void> {
    matchRoute(call)
    const pending = authorize(call)
    if (pending !== undefined) await pending
    checkRequest(call)
    let body = requestBodyFor(call.req, config.maxBodyBytes)
    if (body instanceof Promise) body = await body
    call.release = deps.gate.tryAcquire() ?? await waitForSlot(call)
    // the caller left, or the deadline answered, while this call waited
    if (call.res.destroyed || call.res.writableEnded) {
      call.release()
      return
    }
    forwardToApp(call, body)
  }

  /** The response closed (finished or cut): free what the call holds. */
  function closeCall (call: InvokeCall): void {
    clearTimeout(call.deadline)
    call.release?.()
    if (call.relay !== undefined && !call.res.writableFinished) call.relay.callerGone()
  }

  const deadlineMs = config.deadlineSeconds * 1000

  return function handleInvoke (req, res) {
    const runId = runIdFor(req.headers['x-request-id'])
    const call: InvokeCall = {
      req, res, runId, route: NO_ROUTE, query: NO_QUERY, webhook: undefined, wait: undefined, relay: undefined, release: undefined,
      deadline: deadlineMs > 0 ? setTimeout(expireCall, deadlineMs) : undefined
    }
    function expireCall (): void { expire(call) }
    recordCall(deps, 'invoke', req, res, runId, () => { closeCall(call) })
    run(call).catch(error => {
      if (!res.writableEnded && !res.destroyed) sendError(res, runId, error, (error as { status?: number }).status === 413)
    })
  }
}
