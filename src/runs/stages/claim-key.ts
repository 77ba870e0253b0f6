import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { IdempotencyInProgressError, IdempotencyKeyReusedError } from '../../errors.ts'
import { bodyDigest, idempotencyKey, idempotencySlot } from '../idempotency-key.ts'
import { recordedRun } from '../run-record.ts'
import type { KeptAnswer, KeyEntry, RunScope, RunStatus, RunStore } from '../store/run-store.ts'
import type { LabelledCounter } from '../../shared/metric-contracts.ts'
import { sendJson } from '../../shared/http-answers.ts'
import type { HttpCall } from '../../sidecar/call/http-call.ts'
import type { CallRoute } from '../../sidecar/call/match-route.ts'
import type { RecordedCall } from './recorded-run.ts'
import { type RequestBody, wholeRequestBody } from '../../sidecar/call/request-body.ts'
import type { WebhookRequest } from '../../sidecar/call/webhook-target.ts'

/** The Idempotency-Key a request holds: its slot in the store, which it frees or fills when it ends. */
export interface HeldKey {
  readonly scope: RunScope
  readonly slot: string
  readonly runId: string
  /** The request's body, read whole to take its digest: what goes to the app. */
  readonly body: Buffer | null
  /** When the key was claimed (epoch ms): the run's created_at. */
  readonly claimedAt: number
  /** A sync call: its run, recorded running as the key was claimed. */
  readonly recorded: RecordedCall | undefined
}

/** The Idempotency-Key of a POST (other methods are idempotent already, or not the SPEC's): 400 when malformed. */
export function idempotencyKeyOf (req: IncomingMessage): string | undefined {
  return req.method === 'POST' ? idempotencyKey(req.headers['idempotency-key']) : undefined
}

/** What the idempotency stage found: this request holds the key (it runs), or it was answered from the store. */
export type KeyOutcome = HeldKey | 'answered'

export interface IdempotencyDeps {
  readonly store: RunStore
  /** The largest answer kept for repeats (ENVELOPE_MAX_BODY_BYTES). */
  readonly maxAnswerBytes: number
  readonly logger: Logger
  /** sidecar_runs_total: a recorded sync call counts as its run ends. */
  readonly runsTotal: LabelledCounter<RunStatus>
}

const TOO_LARGE = '{"message":"the answer to this Idempotency-Key was too large to keep"}'

/**
 * The idempotency stage (SPEC: Runs → Idempotency): claims the key's slot for this request, or
 * answers a repeat: the kept answer again (`Idempotent-Replayed: true`, the first's
 * `X-Request-Id`); while the first runs, 409 for a sync repeat and 202 with the first's run id
 * for an async one; 422 when the body differs.
 */
export function createIdempotency (deps: IdempotencyDeps): (call: HttpCall, route: CallRoute, key: string, request: RequestBody, async: boolean, webhook: WebhookRequest | undefined) => Promise<KeyOutcome> {
  return async function claimKey (call, route, key, request, async, webhook) {
    const body = await wholeRequestBody(request)
    const scope = { projectId: route.projectId, appName: route.appName }
    const slot = idempotencySlot(scope, route.appPath, key)
    const digest = bodyDigest(body)
    const claimedAt = Date.now()
    // a sync call is recorded with its claim, in one step: running from now on (GET …/_runs/{id}
    // on any replica); an async one is recorded as it is submitted
    const run = async
      ? undefined
      : recordedRun({
        scope,
        runId: call.runId,
        // a sync run is never run again: its request is not kept
        request: { method: call.req.method as string, path: route.appPath, headers: [], body: null },
        webhook: webhook === undefined ? undefined : { url: webhook.url.href, secret: undefined },
        createdAt: claimedAt
      })
    const held = await deps.store.keys.claim(scope, slot, { runId: call.runId, digest, async }, run)
    if (held === undefined) {
      const recorded = run === undefined ? undefined : { store: deps.store, run, logger: deps.logger, runsTotal: deps.runsTotal, slot }
      return { scope, slot, runId: call.runId, body, claimedAt, recorded }
    }
    if (held.digest !== digest) throw new IdempotencyKeyReusedError()
    if (held.answer !== undefined) {
      if (!call.settled) replay(call.res, held, held.answer, route)
      return 'answered'
    }
    if (!async) throw new IdempotencyInProgressError()
    if (!call.settled) sendJson(call.res, 202, queuedBody(held.runId), { ...replayHeaders(held), location: runLocation(route, held.runId) })
    return 'answered'
  }
}

/**
 * Watches a sync call that holds a key: what the caller gets is copied (up to `maxAnswerBytes`)
 * and kept for repeats when the answer ends, before the caller has its last bytes. A call that never reached the app (503
 * queue full, the deadline while it waited) or whose caller left (the sidecar cut the app
 * request) frees the key instead: a retry runs.
 */
export function keepSyncAnswer (deps: IdempotencyDeps, call: HttpCall, key: HeldKey): void {
  const res = call.res
  const chunks: Buffer[] = []
  let size = 0
  let tooLarge = false
  const keep = (chunk: unknown, encoding: unknown): void => {
    if (tooLarge || chunk === undefined || chunk === null || typeof chunk === 'function') return
    // a Buffer is kept as it is, not copied: what the sinks write is never written to again
    const bytes = typeof chunk === 'string'
      ? Buffer.from(chunk, typeof encoding === 'string' ? encoding as BufferEncoding : 'utf8')
      : Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array)
    size += bytes.length
    if (size > deps.maxAnswerBytes) {
      tooLarge = true
      chunks.length = 0
    } else {
      chunks.push(bytes)
    }
  }
  let contentType: string | undefined
  const writeHead = res.writeHead
  res.writeHead = function (this: ServerResponse, status: number, ...rest: unknown[]) {
    contentType = contentTypeIn(rest[rest.length - 1]) ?? contentType
    return (writeHead as (...args: unknown[]) => ServerResponse).call(this, status, ...rest)
  } as ServerResponse['writeHead']
  const write = res.write
  const end = res.end
  res.write = function (this: ServerResponse, chunk: unknown, encoding?: unknown, callback?: unknown) {
    keep(chunk, encoding)
    return (write as (...args: unknown[]) => boolean).call(this, chunk, encoding, callback)
  } as ServerResponse['write']
  let kept = false
  res.end = function (this: ServerResponse, chunk?: unknown, encoding?: unknown, callback?: unknown) {
    const finish = (): ServerResponse => (end as (...args: unknown[]) => ServerResponse).call(this, chunk, encoding, callback)
    if (kept || !call.forwarded || this.destroyed) return finish()
    kept = true
    keep(chunk, encoding)
    const answer: KeptAnswer = tooLarge
      ? { status: 409, contentType: 'application/json; charset=utf-8', body: Buffer.from(TOO_LARGE) }
      : { status: this.statusCode, contentType: contentType ?? headerText(this.getHeader('content-type')), body: Buffer.concat(chunks) }
    // The answer is kept before the caller has its end: a retry sent once the answer is complete is
    // always a replay. It is kept with the run's end (handed to its record, whose end the relay
    // writes as the answer ends, after its webhook): the store runs commands in order, so once the
    // caller holds the answer, its webhook is written down too.
    const recorded = key.recorded
    if (recorded !== undefined) recorded.answer = answer
    queueMicrotask(() => {
      const keeping = recorded?.kept ?? deps.store.keys.keepAnswer(key.scope, key.slot, key.runId, answer)
      keeping
        .catch((error: unknown) => { deps.logger.warn({ err: error, runId: call.runId }, 'Idempotency-Key answer not kept') })
        .finally(finish)
    })
    return this
  } as ServerResponse['end']
  call.onClose(() => {
    // no complete answer from the app (never forwarded, or its caller left and the app request was
    // cut): a retry runs; a run that never reached the app is forgotten too (it never ran)
    if (!kept) deps.store.keys.drop(key.scope, key.slot, key.runId, !call.forwarded).catch((error: unknown) => { deps.logger.warn({ err: error, runId: call.runId }, 'Idempotency-Key not freed') })
  })
}

/** An async request that holds a key: its 202 is the answer repeats get; a refused one frees the key. */
export async function keepAsyncAnswer (store: RunStore, key: HeldKey, submitted: Promise<unknown>): Promise<void> {
  try {
    await submitted
  } catch (error) {
    await store.keys.drop(key.scope, key.slot, key.runId).catch(() => {})
    throw error
  }
  await store.keys.keepAnswer(key.scope, key.slot, key.runId, { status: 202, contentType: 'application/json; charset=utf-8', body: Buffer.from(queuedBody(key.runId)) })
}

function replay (res: ServerResponse, held: KeyEntry, answer: KeptAnswer, route: CallRoute): void {
  const headers: OutgoingHttpHeaders = { ...replayHeaders(held), 'content-length': answer.body.length }
  if (answer.contentType !== undefined) headers['content-type'] = answer.contentType
  if (answer.contentType?.startsWith('text/event-stream') === true) {
    headers['cache-control'] = 'no-cache'
    headers['x-accel-buffering'] = 'no'
  }
  if (held.async) headers.location = runLocation(route, held.runId)
  res.writeHead(answer.status, headers)
  res.end(answer.body)
}

const replayHeaders = (held: KeyEntry): Record<string, string> => ({ 'x-request-id': held.runId, 'idempotent-replayed': 'true' })
const queuedBody = (runId: string): string => `{"run_id":${JSON.stringify(runId)},"status":"queued"}`
const runLocation = (route: CallRoute, runId: string): string => `/v4/${route.projectId}/${route.appName}/_runs/${runId}`

const headerText = (value: unknown): string | undefined => value === undefined ? undefined : String(value)

/** The Content-Type among the headers given to writeHead: an object, or a [name, value, …] list. */
function contentTypeIn (headers: unknown): string | undefined {
  if (Array.isArray(headers)) {
    const flat = headers.flat() as unknown[]
    for (let i = 0; i + 1 < flat.length; i += 2) {
      if (String(flat[i]).toLowerCase() === 'content-type') return String(flat[i + 1])
    }
    return undefined
  }
  if (headers === null || typeof headers !== 'object') return undefined
  for (const [name, value] of Object.entries(headers)) {
    if (name.toLowerCase() === 'content-type') return headerText(value)
  }
  return undefined
}
