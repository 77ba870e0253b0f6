import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { ConcurrencyGate } from '../../lifecycle/concurrency-gate.ts'
import { queuedRecord, startedRecord } from '../run-record.ts'
import type { RunStore } from '../store/run-store.ts'
import type { NewRun, RunStatus, TakenRun } from '../run-data.ts'
import type { InternalErrorReporter } from '../../shared/internal-errors.ts'
import type { LabelledCounter } from '../../shared/metric-contracts.ts'
import type { StageCall } from '../../call/stage-call.ts'
import { takeSlot } from '../../call/take-slot.ts'
import type { AppResponseRelay } from '../../respond/app-response-relay.ts'
import type { WebhookTee } from '../../webhook/webhook-tee.ts'
import { answerWaitRanOut } from './queued-answer.ts'
import { type RecordedRun, RecordedRunTee } from './recorded-run.ts'
import { withAttempt } from '../runner/run-attempts.ts'
import { wholeRequestBody } from '../../call/request-body.ts'

/** RFC 7240's `wait` preference (its value may be quoted), among the others of `Prefer`. */
const WAIT = /(?:^|,)\s*wait\s*=\s*("?)(\d{1,4})\1\s*(?=[,;]|$)/i
const LONGEST_WAIT_SECONDS = 3600

/**
 * The bounded-wait stage: `Prefer: wait=<seconds>` (1 to 3600) of a sync call without an
 * Idempotency-Key (a keyed call is a recorded run already: its retry gets its answer) arms the
 * wait, counted from the call's arrival (`call.waitOver` aborts when it runs out). Any other value
 * is ignored, as RFC 7240 says of a preference that cannot be honoured.
 */
export function startBoundedWait (call: StageCall): void {
  const prefer = call.req.headers.prefer
  if (prefer === undefined || call.async || call.idempotencyKey !== undefined) return
  const match = WAIT.exec(Array.isArray(prefer) ? prefer.join(',') : prefer)
  const seconds = match === null ? 0 : Number(match[2])
  if (seconds < 1 || seconds > LONGEST_WAIT_SECONDS) return
  const over = new AbortController()
  const timer = setTimeout(() => { over.abort(new Error('Prefer: wait ran out')) }, Math.max(0, seconds * 1000 - (performance.now() - call.arrivedAt)))
  call.onClose(() => { clearTimeout(timer) })
  call.waitSeconds = seconds
  call.waitOver = over.signal
}

export interface BoundedWaitDeps {
  readonly store: RunStore
  /** The async stage: a call whose wait ran out before it had a slot is queued as an async run. */
  readonly submitRun: (call: StageCall, preferenceApplied?: number) => Promise<boolean>
  /** The largest result a run keeps (ENVELOPE_MAX_BODY_BYTES). */
  readonly maxResultBytes: number
  readonly logger: Logger
  readonly runsTotal: LabelledCounter<RunStatus>
  readonly reportInternal: InternalErrorReporter
  /** HOSTNAME: this replica's name in a run's end line. */
  readonly replica?: string | undefined
  /** RUN_MAX_ATTEMPTS: above 1, a call that goes on as a run is one attempt of it, run again if interrupted (a shared store). */
  readonly maxAttempts?: number
}

/** What the bounded wait needs of the app request's relay: when it went, and handing its answer to a run. */
export type WatchedRelay = Pick<AppResponseRelay, 'forwardedAt' | 'outliveAsRun'>

/** The app request of a call with a bounded wait, as it is about to be sent. */
export interface WaitRequest {
  readonly method: string
  /** Path and query as sent to the app. */
  readonly path: string
  /** The headers as forwarded: a flat [name, value, …] list. */
  readonly headers: string[]
}

export interface BoundedWait {
  /**
   * The gate stage for a call with a bounded wait: a slot (false), or, when the wait runs out
   * first, the call queued as an async run that any replica may take, answered 202 (true).
   */
  takeSlotWithin: (gate: ConcurrencyGate, call: StageCall) => boolean | Promise<boolean>
  /**
   * The call goes to the app (its relay and webhook tee, its request about to be sent): should its
   * wait run out before the app answers, it goes on as a run, answered 202. Returns the headers
   * to send: with RUN_MAX_ATTEMPTS above 1, `X-Run-Attempt: 1` (it may become a run's first attempt).
   */
  watch: (call: StageCall, relay: WatchedRelay, webhookTee: WebhookTee | undefined, request: WaitRequest) => string[]
}

/**
 * docs/controlling-work.md, "Bounded wait: `Prefer: wait`". A call answered within its wait is a
 * plain call and costs nothing more.
 */
export function createBoundedWait (deps: BoundedWaitDeps): BoundedWait {
  const maxAttempts = deps.maxAttempts ?? 1
  /** Attempts counted: the record says `attempt`, the app gets X-Run-Attempt. */
  const counted = maxAttempts > 1
  /** A run gone on from a call may be queued again (a shared store): its request is kept, its body read whole first. */
  const retried = counted && deps.store.queue.shared && deps.store.records.retry !== undefined

  /** The wait ran out at the app before its response began: the call is recorded running, and its answer goes to the run. */
  async function goOnAsRun (call: StageCall, relay: WatchedRelay, webhookTee: WebhookTee | undefined, sent: WaitRequest): Promise<void> {
    if (call.settled || call.out.headersSent) return // answered, or its stream has begun: that goes on to the caller
    const { route } = call
    const createdAt = Math.round(performance.timeOrigin + call.arrivedAt)
    const startedAt = Math.round(performance.timeOrigin + relay.forwardedAt)
    const body = Buffer.isBuffer(call.body) ? call.body : null // read whole before it went (queueAfterWait) when kept
    const submitted: NewRun = {
      scope: { projectId: route.projectId, appName: route.appName },
      runId: call.runId,
      // kept only for a next attempt: a run that is never queued again is never sent again
      request: retried ? { method: sent.method, path: sent.path, headers: sent.headers, body } : { method: sent.method, path: route.appPath, headers: [], body: null },
      webhook: call.webhook,
      createdAt,
      urgency: call.urgency,
      caller: call.fairCaller,
      sub: call.caller
    }
    const attempt = counted ? 1 : undefined
    const running = startedRecord(queuedRecord(submitted), createdAt, startedAt, attempt)
    const run: TakenRun = { ...submitted, entry: '', running, runningJson: JSON.stringify(running), ...(attempt === undefined ? {} : { attempt }) }
    const recorded: RecordedRun = {
      store: deps.store, run, logger: deps.logger, runsTotal: deps.runsTotal, reportInternal: deps.reportInternal, replica: deps.replica,
      ...(retried ? { maxAttempts } : {})
    }
    const since = { forwardedAt: relay.forwardedAt, startedAt }
    const makeTee = (): RecordedRunTee => new RecordedRunTee(recorded, webhookTee, deps.maxResultBytes, since)
    if (!relay.outliveAsRun(makeTee)) return
    call.outlive() // its slot and the drain's count are held until the app answers
    // sent now, before anything the run appends (one connection, commands in order); its end waits for it
    const opening = deps.store.records.open(run)
    recorded.opened = opening
    try {
      recorded.run = await opening
      recorded.opened = undefined
    } catch (error) {
      // not recorded (the store down, the id taken): the caller is told; the app request goes on unrecorded
      call.answer(error)
      return
    }
    if (!call.settled) answerWaitRanOut(call.out, route, call.runId, 'running', call.waitSeconds as number)
  }

  async function queueAfterWait (gate: ConcurrencyGate, call: StageCall, over: AbortSignal): Promise<boolean> {
    // a wait that ran out before the gate (a slow body, a store round trip) still takes a free slot
    // (the call goes on as a run at once); else the gate refuses at once and the call is queued
    // a run that may be queued again keeps its request's body: read whole now, as an async submit reads it
    if (retried) call.body = await wholeRequestBody(call.body)
    try {
      await takeSlot(gate, call, AbortSignal.any([call.signal, over]))
      return false
    } catch (error) {
      if (!over.aborted || call.signal.aborted) throw error
      return await deps.submitRun(call, call.waitSeconds)
    }
  }

  return {
    takeSlotWithin (gate, call) {
      if (call.waitOver === undefined) {
        const slot = takeSlot(gate, call) // a plain call: no promise more than the gate's own
        return slot instanceof Promise ? slot.then(() => false) : false
      }
      return queueAfterWait(gate, call, call.waitOver)
    },
    watch (call, relay, webhookTee, request) {
      const over = call.waitOver
      if (over === undefined) return request.headers
      const ranOut = (): void => {
        goOnAsRun(call, relay, webhookTee, request).catch((error: unknown) => { deps.reportInternal(error, { runId: call.runId }) })
      }
      if (over.aborted) ranOut() // between its slot and its forwarding
      else over.addEventListener('abort', ranOut, { once: true })
      return counted ? withAttempt(request.headers, 1) : request.headers
    }
  }
}
