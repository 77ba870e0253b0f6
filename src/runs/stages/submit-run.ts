import type { RunStore } from '../store/run-store.ts'
import type { StoredRequest } from '../run-data.ts'
import { appRequestHeaders, type RequestHeaderRules } from '../../call/forward-headers.ts'
import type { StageCall } from '../../call/stage-call.ts'
import { appRequestPath } from '../../call/match-route.ts'
import { wholeRequestBody } from '../../call/request-body.ts'
import { keepAsyncAnswer } from './claim-key.ts'
import { answerQueued, answerWaitRanOut } from './queued-answer.ts'

const RESPOND_ASYNC = /(^|,)\s*respond-async\s*(,|;|$)/i

/** `?async=true`, or `Prefer: respond-async` (RFC 7240). */
export function wantsAsync (call: StageCall): boolean {
  if (call.route.async) return true
  const prefer = call.req.headers.prefer
  if (prefer === undefined) return false
  return RESPOND_ASYNC.test(Array.isArray(prefer) ? prefer.join(',') : prefer)
}

export interface RunSubmitDeps {
  readonly store: RunStore
  /** APP_URL's path, without a trailing slash ('' for none). */
  readonly basePath: string
  readonly headerRules: RequestHeaderRules
}

/**
 * The async stage (202; 503 queue full or run store unavailable): the request as it would have
 * been forwarded is recorded and queued, and the caller is answered at once with the run's id
 * and where to read it. The stage always answers the call (true).
 */
export function createRunSubmit (deps: RunSubmitDeps): (call: StageCall, waitRanOut?: number) => Promise<boolean> {
  /** `waitRanOut`: a sync call whose `Prefer: wait=<seconds>` ran out while it waited for a slot (its 202 says so). */
  return async function submitRun (call, waitRanOut) {
    const { route, webhook } = call
    const request: StoredRequest = {
      method: call.req.method as string,
      path: appRequestPath(route, deps.basePath),
      // the run keeps its submitter's trace: the call's server span (tracing on), else the caller's context as sent
      headers: withoutRespondAsync(appRequestHeaders(call.req, call.runId, deps.headerRules, call.trace?.context)),
      body: await wholeRequestBody(call.body)
    }
    const submitted = deps.store.queue.submit({
      scope: { projectId: route.projectId, appName: route.appName },
      runId: call.runId,
      request,
      webhook,
      createdAt: Date.now(),
      urgency: call.urgency,
      caller: call.fairCaller,
      sub: call.caller
    })
    // with an Idempotency-Key, the 202 is kept for repeats before the caller has it; a refused run frees the key
    await (call.keySlot === undefined ? submitted : keepAsyncAnswer(deps.store, call, submitted))
    if (call.settled) return true
    if (waitRanOut === undefined) answerQueued(call.out, route, call.runId, false)
    else answerWaitRanOut(call.out, route, call.runId, 'queued', waitRanOut)
    return true
  }
}

/** The `Prefer` header without `respond-async`, which asked the sidecar, not the app (dropped when nothing is left). */
function withoutRespondAsync (headers: string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i] as string
    let value = headers[i + 1] as string
    if (name.toLowerCase() === 'prefer') {
      value = value.split(',').map(part => part.trim()).filter(part => !/^respond-async\s*(;|$)/i.test(part)).join(', ')
      if (value === '') continue
    }
    out.push(name, value)
  }
  return out
}
