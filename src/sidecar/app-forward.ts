import type { Pool } from 'undici'
import { AppUnreachableError } from '../errors.ts'
import { traceContextOf } from '../shared/trace-contracts.ts'
import type { WebhookSubmitter } from '../webhook/webhook-delivery.ts'
import { WebhookTee } from '../webhook/webhook-tee.ts'
import { AppResponseRelay } from '../respond/app-response-relay.ts'
import type { CancelAtApp } from '../call/app-cancel.ts'
import type { HttpCall } from '../call/http-call.ts'
import { appRequestHeaders, type RequestHeaderRules } from '../call/forward-headers.ts'
import { appRequestPath } from '../call/match-route.ts'
import type { SinkChooser } from '../respond/response-table.ts'
import type { WaitRequest } from '../runs/stages/bounded-wait.ts'

export interface AppForwardDeps {
  readonly app: Pool
  /** APP_URL, as the log line names it when the app cannot be reached. */
  readonly appUrl: string
  /** APP_URL's path, without a trailing slash ('' for none). */
  readonly basePath: string
  readonly chooseSink: SinkChooser
  readonly webhooks: WebhookSubmitter
  readonly webhookMaxBodyBytes: number
  /** Which headers the app gets (Authorization when the sidecar checked it, Accept-Encoding for the envelope). */
  readonly headerRules: RequestHeaderRules
  /** Told of each call that goes to the app with a bounded wait (`Prefer: wait`): it may go on as a run; the headers to send. */
  readonly watchWait?: (call: HttpCall, relay: AppResponseRelay, webhookTee: WebhookTee | undefined, request: WaitRequest) => string[]
  /** APP_CANCEL_PATH's POST, for an app request the sidecar cuts (a cancel, a deadline, a caller gone); undefined: unset. */
  readonly cancelAtApp?: CancelAtApp | undefined
}

/**
 * The forward stage (502): the request goes to the app; its answer comes back through the
 * response table, teed to the webhook sender when the call asked for one, and recorded on its run
 * when the call is one.
 */
export function createAppForward (deps: AppForwardDeps): (call: HttpCall) => void {
  const headerRules = deps.headerRules
  const unreachable = (detail: string): AppUnreachableError => new AppUnreachableError(detail, deps.appUrl)
  return function forwardToApp (call) {
    if (call.settled) return // the caller left, or the deadline answered, while the call waited (a recorded run is forgotten with its key)
    const { route, webhook } = call
    const method = call.req.method as string
    // the webhook continues the call's trace: its server span's, or (tracing off) the caller's context as sent
    const webhookTee = webhook === undefined
      ? undefined
      : new WebhookTee(webhook, call.runId, deps.webhookMaxBodyBytes, deps.webhooks,
        { projectId: route.projectId, appName: route.appName }, call.trace?.context ?? traceContextOf(call.req.headers))
    const tee = call.recording === undefined ? webhookTee : call.recording(webhookTee)
    const span = call.trace?.appRequest(method)
    const relay = new AppResponseRelay(call, deps.chooseSink, unreachable, tee, span, deps.cancelAtApp)
    call.forwarded = true
    call.onAbort(relay)
    const path = appRequestPath(route, deps.basePath)
    let headers = appRequestHeaders(call.req, call.runId, headerRules, span?.context)
    if (call.waitOver !== undefined && deps.watchWait !== undefined) headers = deps.watchWait(call, relay, webhookTee, { method, path, headers })
    deps.app.dispatch({ method, path, headers, body: call.body }, relay)
  }
}
