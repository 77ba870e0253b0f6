import type { OutgoingHttpHeaders } from 'node:http'
import type { AnswerOut } from '../../shared/answer-writer.ts'
import type { Logger } from 'pino'
import { IdempotencyInProgressError, IdempotencyKeyReusedError } from '../../errors.ts'
import { idempotencyKey, idempotencySlot, requestDigest } from '../idempotency-key.ts'
import { recordedRun } from '../run-record.ts'
import type { RunStore } from '../store/run-store.ts'
import type { KeptAnswer, KeyEntry, RunStatus } from '../run-data.ts'
import type { InternalErrorReporter } from '../../shared/internal-errors.ts'
import type { LabelledCounter } from '../../shared/metric-contracts.ts'
import type { StageCall } from '../../call/stage-call.ts'
import type { CallRoute } from '../../call/match-route.ts'
import { splitQuery } from '../../call/invoke-route.ts'
import { wholeRequestBody } from '../../call/request-body.ts'
import { answerQueued, queuedBody, runLocation } from './queued-answer.ts'
import { type RecordedRun, RecordedRunTee } from './recorded-run.ts'

/**
 * The Idempotency-Key of a POST (other methods are idempotent already, or their key is not the
 * sidecar's: docs/runs.md, "Retrying safely: `Idempotency-Key`"): 400 when malformed.
 */
export function idempotencyKeyOf (call: StageCall): string | undefined {
  const req = call.req
  return req.method === 'POST' ? idempotencyKey(req.headers['idempotency-key']) : undefined
}

export interface IdempotencyDeps {
  readonly store: RunStore
  /** The largest answer kept for repeats (ENVELOPE_MAX_BODY_BYTES): also the largest result a recorded run keeps. */
  readonly maxAnswerBytes: number
  readonly logger: Logger
  /** sidecar_runs_total: a recorded sync call counts as its run ends. */
  readonly runsTotal: LabelledCounter<RunStatus>
  /** Where an exception in a recorded run's store writes goes. */
  readonly reportInternal: InternalErrorReporter
  /** HOSTNAME: this replica's name in a recorded run's end line. */
  readonly replica?: string | undefined
}

/** A sync call recorded with its Idempotency-Key, whose slot keeps its answer. */
type KeyedRun = RecordedRun & { readonly slot: string }

const TOO_LARGE = '{"message":"the answer to this Idempotency-Key was too large to keep"}'

/**
 * The idempotency stage (docs/runs.md, "Retrying safely: `Idempotency-Key`"), for a call with an
 * Idempotency-Key: claims the key's slot for this call and its caller (`call.keySlot`; its body is
 * read whole for the digest), or answers a repeat: the kept answer again
 * (`Idempotent-Replayed: true`, the first's `X-Request-Id`); while the first runs, 409 for a sync
 * repeat and 202 with the first's run id for an async one; 422 when the query or body differs.
 * True when the call was answered. A sync call that holds the key is recorded as a run
 * (`call.recording`), and its answer is kept for repeats as it ends (keepSyncAnswer).
 */
export function createIdempotency (deps: IdempotencyDeps): (call: StageCall) => Promise<boolean> {
  return async function claimKey (call) {
    const { route } = call
    const body = await wholeRequestBody(call.body)
    call.body = body
    const scope = { projectId: route.projectId, appName: route.appName }
    const slot = idempotencySlot(scope, route.appPath, call.caller, call.idempotencyKey as string)
    const digest = requestDigest(fingerprintQuery(route), body)
    const async = call.async
    // a sync call is recorded with its claim, in one step: running from now on (GET …/_runs/{id}
    // on any replica); an async one is recorded as it is submitted
    const run = async
      ? undefined
      : recordedRun({
        scope,
        runId: call.runId,
        // a sync run is never run again: its request is not kept
        request: { method: call.req.method as string, path: route.appPath, headers: [], body: null },
        webhook: call.webhook === undefined ? undefined : { url: call.webhook.url, secret: undefined },
        createdAt: Date.now(),
        sub: call.caller
      })
    const held = await deps.store.keys.claim(scope, slot, { runId: call.runId, digest, async }, run)
    if (held === undefined) {
      call.keySlot = slot
      if (run !== undefined) {
        const recorded: KeyedRun = { store: deps.store, run, logger: deps.logger, runsTotal: deps.runsTotal, reportInternal: deps.reportInternal, replica: deps.replica, slot }
        call.recording = webhook => new RecordedRunTee(recorded, webhook, deps.maxAnswerBytes)
        keepSyncAnswer(deps, call, recorded)
      }
      return false
    }
    if (held.digest !== digest) throw new IdempotencyKeyReusedError()
    if (held.answer !== undefined) {
      if (!call.settled) replay(call.out, held, held.answer, route)
      return true
    }
    if (!async) throw new IdempotencyInProgressError()
    if (!call.settled) answerQueued(call.out, route, held.runId, true)
    return true
  }
}

/**
 * Watches a sync call that holds a key (in `slot`), as a tap on its answer writer: what the caller
 * gets is copied (up to `maxAnswerBytes`) and kept for repeats when the answer ends, before the
 * caller has its last bytes. A caller that leaves once its request reached the app does not stop
 * it: the answer is made all the same, copied and kept (the writer is muted: nothing more goes to
 * its socket). A call that never reached the app (503 queue full, the deadline or its caller
 * leaving while it waited) frees the key instead: a retry runs.
 */
function keepSyncAnswer (deps: IdempotencyDeps, call: StageCall, recorded: KeyedRun): void {
  const chunks: Buffer[] = []
  let size = 0
  let tooLarge = false
  let status = 0
  let contentType: string | undefined
  let kept = false
  call.out.tap({
    head: (answered, headers) => {
      status = answered
      contentType = contentTypeIn(headers) ?? contentType
    },
    bytes: chunk => {
      if (tooLarge) return
      // a Buffer is kept as it is, not copied: what the sinks write is never written to again
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
      size += bytes.length
      if (size > deps.maxAnswerBytes) {
        tooLarge = true
        chunks.length = 0
      } else {
        chunks.push(bytes)
      }
    },
    ending: () => {
      if (!call.forwarded || (call.out.destroyed && !call.outliving)) return undefined
      kept = true
      const answer: KeptAnswer = tooLarge
        ? { status: 409, contentType: 'application/json; charset=utf-8', body: Buffer.from(TOO_LARGE) }
        : { status, contentType, body: Buffer.concat(chunks) }
      // The answer is kept before the caller has its end: a retry sent once the answer is complete is
      // always a replay. It is kept with the run's end (handed to its record, whose end the relay
      // writes as the answer ends, after its webhook; hence a microtask's wait): the store runs
      // commands in order, so once the caller holds the answer, its webhook is written down too.
      recorded.answer = answer
      return Promise.resolve()
        .then(async () => { await (recorded.kept ?? deps.store.keys.keepAnswer(recorded.run.scope, recorded.slot, call.runId, answer)) })
        .catch((error: unknown) => { deps.logger.warn({ err: error, runId: call.runId }, 'Idempotency-Key answer not kept') })
    }
  })
  call.onClose(() => {
    // no complete answer (never forwarded, or the app failed mid-answer, which cuts the caller's
    // connection): a retry runs; a run that never reached the app is forgotten too (it never ran)
    if (!kept) deps.store.keys.drop(recorded.run.scope, recorded.slot, call.runId, !call.forwarded).catch((error: unknown) => { deps.logger.warn({ err: error, runId: call.runId }, 'Idempotency-Key not freed') })
  })
}

/** An async call that holds a key (`call.keySlot`): its 202 is the answer repeats get; a refused one frees the key. */
export async function keepAsyncAnswer (store: RunStore, call: StageCall, submitted: Promise<unknown>): Promise<void> {
  const scope = { projectId: call.route.projectId, appName: call.route.appName }
  const slot = call.keySlot as string
  try {
    await submitted
  } catch (error) {
    await store.keys.drop(scope, slot, call.runId).catch(() => {})
    throw error
  }
  await store.keys.keepAnswer(scope, slot, call.runId, { status: 202, contentType: 'application/json; charset=utf-8', body: Buffer.from(queuedBody(call.runId)) })
}

function replay (res: AnswerOut, held: KeyEntry, answer: KeptAnswer, route: CallRoute): void {
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

/** The query a repeat must match: the one the app gets, without `access_token` even when it is not the sidecar's. */
const fingerprintQuery = (route: CallRoute): string => splitQuery(route.forwardedQuery, true).forwarded

const replayHeaders = (held: KeyEntry): Record<string, string> => ({ 'x-request-id': held.runId, 'idempotent-replayed': 'true' })

/** The Content-Type among the headers of an answer's head. */
function contentTypeIn (headers: OutgoingHttpHeaders): string | undefined {
  for (const name in headers) {
    if (name.toLowerCase() === 'content-type') return String(headers[name])
  }
  return undefined
}
