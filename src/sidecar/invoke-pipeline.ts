import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Pool } from 'undici'
import type { TokenVerifier } from '../auth/token-verifier.ts'
import { RouteNotFoundError } from '../errors.ts'
import type { SidecarConfig } from '../config/sidecar-config.ts'
import type { InternalErrorReporter } from '../shared/internal-errors.ts'
import { pathPrefix } from '../shared/url-paths.ts'
import type { ConcurrencyGate } from '../lifecycle/concurrency-gate.ts'
import type { RunStore } from '../runs/store/run-store.ts'
import type { Tracer } from '../shared/trace-contracts.ts'
import { createStreamSinks } from '../stream/stream-sinks.ts'
import type { WebhookSubmitter } from '../webhook/webhook-delivery.ts'
import { matchRunRoute } from '../runs/routes/run-route.ts'
import { createRunRoutes } from '../runs/routes/run-routes.ts'
import { createIdempotency, idempotencyKeyOf } from '../runs/stages/claim-key.ts'
import { createRunSubmit, wantsAsync } from '../runs/stages/submit-run.ts'
import { createBoundedWait, startBoundedWait } from '../runs/stages/bounded-wait.ts'
import { createAppForward } from './app-forward.ts'
import { authorizeCall } from '../call/authorize-call.ts'
import type { CancelAtApp } from '../call/app-cancel.ts'
import { startCancelAfter, startDeadline } from '../call/call-deadline.ts'
import type { CallsByRunId } from '../call/calls-by-run-id.ts'
import { CorsPolicy } from '../call/cors.ts'
import type { CallRecorder } from '../call/call-record.ts'
import { answerFinishedStream } from '../call/finished-stream.ts'
import { HttpCall } from '../call/http-call.ts'
import { matchRoute } from '../call/match-route.ts'
import { readRequestBody } from '../call/request-body.ts'
import { readPriority } from '../call/call-priority.ts'
import { takeSlot } from '../call/take-slot.ts'
import { UpgradeCall } from '../call/upgrade-call.ts'
import { webhookTarget } from '../call/webhook-target.ts'
import { responseTable } from '../respond/response-table.ts'
import { watchCaller } from './websocket/watch-caller.ts'
import { createWebSocketForward, type WebSocketForward } from './websocket/websocket-forward.ts'

export interface InvokeDeps extends CallRecorder {
  readonly config: SidecarConfig
  /** Undefined when auth is disabled. */
  readonly verifier: TokenVerifier | undefined
  readonly app: Pool
  readonly webhooks: WebhookSubmitter
  readonly gate: ConcurrencyGate
  /** Where async runs are recorded and queued. */
  readonly runs: RunStore
  /** Makes each call's spans (tracing on). */
  readonly tracer?: Tracer | undefined
  /** Where an exception in a recorded run's store writes goes (it fails the run, not the call). */
  readonly reportInternal: InternalErrorReporter
  /** This replica's calls in flight by run id: a cancel finds them. */
  readonly calls: CallsByRunId
  /** APP_CANCEL_PATH's POST, for an app request the sidecar cuts; undefined: unset. */
  readonly cancelAtApp?: CancelAtApp | undefined
}

/**
 * A `/v4/{project}/{app}/{path…}` call, stage by stage in the order of checks of docs/routes.md.
 * A stage stops the call one way (call/stage-call.ts): it throws the SidecarError its check
 * answers with, which the call answers (with `X-Request-Id`), or returns true once it answered.
 */
export function createInvokeHandler (deps: InvokeDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const { config, gate, verifier, calls } = deps
  const heartbeatMs = config.sseHeartbeatSeconds * 1000
  const streams = createStreamSinks({ metrics: deps.metrics, heartbeatMs, maxEventBytes: config.streamMaxEventBytes })
  const basePath = pathPrefix(config.appUrl)
  const cors = config.corsAllowedOrigins === undefined ? undefined : new CorsPolicy(config.corsAllowedOrigins)
  const headerRules = { dropAuthorization: verifier !== undefined, dropAcceptEncoding: config.runtime === 'cortex', upgrade: false }
  const submitRun = createRunSubmit({ store: deps.runs, basePath, headerRules })
  const boundedWait = createBoundedWait({
    store: deps.runs, submitRun, maxResultBytes: config.envelopeMaxBodyBytes, logger: deps.logger, runsTotal: deps.metrics.runsTotal, reportInternal: deps.reportInternal, replica: config.replicaName,
    maxAttempts: config.runMaxAttempts
  })
  const forwardToApp = createAppForward({
    app: deps.app,
    appUrl: config.appUrl.href,
    basePath,
    chooseSink: responseTable(streams, config.runtime, config.envelopeMaxBodyBytes, cors !== undefined),
    webhooks: deps.webhooks,
    webhookMaxBodyBytes: config.webhookMaxBodyBytes,
    headerRules,
    watchWait: boundedWait.watch,
    cancelAtApp: deps.cancelAtApp
  })
  const serveRunRoute = createRunRoutes({
    store: deps.runs, maxReaders: config.runMaxReaders, heartbeatMs, metrics: deps.metrics, runsTotal: deps.metrics.runsTotal, calls: deps.calls, cancels: deps.metrics.cancels, logger: deps.logger, access: config.runAccess
  })
  const claimKey = createIdempotency({ store: deps.runs, maxAnswerBytes: config.envelopeMaxBodyBytes, logger: deps.logger, runsTotal: deps.metrics.runsTotal, reportInternal: deps.reportInternal, replica: config.replicaName })
  // an async body no queue could hold is refused before it is read
  const asyncMaxBodyBytes = Math.min(config.maxBodyBytes, config.asyncQueueMaxBytes)
  const bodyLimit = (async: boolean): number => async ? asyncMaxBodyBytes : config.maxBodyBytes

  async function invoke (call: HttpCall): Promise<void> {
    if (cors?.answer(call) === true) return                                // CORS headers for an allowed Origin; 204 its preflight, 403 another's
    call.route = matchRoute(call, config)                                  // 404 unknown route, project or app
    await authorizeCall(call, verifier)                                    // 401 bad token, 403 another project
    if (answerFinishedStream(call)) return                                 // 204 GET/HEAD with Last-Event-ID <run_id>.done: an EventSource stops
    const runRoute = matchRunRoute(call.route)                             // 400 malformed run id; _runs never reaches the app
    if (runRoute !== undefined && await serveRunRoute(call, runRoute)) return // 404 no such run, 409, 503 run store unavailable
    calls.add(call)                                                        // known by its run id until it closes: a cancel finds it
    call.webhook = webhookTarget(call)                                     // 400 malformed webhookEndpoint
    call.idempotencyKey = idempotencyKeyOf(call)                           // 400 malformed Idempotency-Key (POSTs)
    readPriority(call)                                                     // Priority: u=<0-7> (else 3); the caller waits are shared fairly by
    call.async = wantsAsync(call)                                          // ?async=true, Prefer: respond-async
    startCancelAfter(call, config.deadlineSeconds)                         // 400 malformed Cancel-After; a sync call's own deadline (504)
    startBoundedWait(call)                                                 // Prefer: wait=N (1–3600; else ignored): a sync call's wait
    call.body = await readRequestBody(call, bodyLimit(call.async))         // 400 bad Content-Length, 413 too large (async: ASYNC_QUEUE_MAX_BYTES too)
    if (call.idempotencyKey !== undefined && await claimKey(call)) return  // 409 in progress, 422 other body, a repeat's kept answer; a sync call recorded as a run (409 id taken, 503 store down)
    if (call.async && await submitRun(call)) return                        // 202; 503 async queue full
    if (await boundedWait.takeSlotWithin(gate, call)) return               // 503 queue full; waits for first readiness; 202 queued: the wait ran out first
    forwardToApp(call)                                                     // 502 app unreachable; the response table; 202 running: the wait ran out at the app
  }

  return function handleInvoke (req, res) {
    const call = new HttpCall(deps, 'invoke', req, res)                    // run id; log line, metrics, drain on close
    call.trace = deps.tracer?.startCall(req.method as string, req.headers) // its server span (tracing on), ended on close
    startDeadline(call, config.deadlineSeconds)                            // 504 past DEADLINE_SECONDS
    invoke(call).catch(error => { call.answer(error) })
  }
}

/**
 * A WebSocket upgrade on `/v4/…`: the same route, auth and gate stages as a call (no webhook, no
 * deadline), then the handshake and every frame pass to and from the app untouched.
 */
export function createUpgradeHandler (deps: Omit<InvokeDeps, 'app' | 'webhooks' | 'runs' | 'reportInternal' | 'calls'>): WebSocketForward & {
  handleUpgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void
} {
  const { config, gate, verifier } = deps
  const forward = createWebSocketForward(deps)

  async function upgrade (call: UpgradeCall, head: Buffer, caller: ReturnType<typeof watchCaller>): Promise<void> {
    call.route = matchRoute(call, config)                                  // 404 unknown route, project or app
    await authorizeCall(call, verifier)                                    // 401 bad token, 403 another project
    if (matchRunRoute(call.route) !== undefined) throw new RouteNotFoundError() // 404: `_` paths are the sidecar's, never upgraded
    readPriority(call)                                                     // Priority: u=<0-7> (else 3); the caller waits are shared fairly by
    const slot = await takeSlot(gate, call)                                // 503 queue full; held until the socket closes
    forward.toApp(call, slot, caller.stop(head))                           // 502; the app's 101 or its refusal
  }

  return {
    ...forward,
    handleUpgrade (req, socket, head) {
      const call = new UpgradeCall(deps, req, socket)                      // run id; log line, metrics, drain on close
      const caller = watchCaller(call)                                     // the caller's FIN ends a wait; early bytes kept
      upgrade(call, head, caller).catch(error => { caller.stop(head); call.answer(error) })
    }
  }
}
