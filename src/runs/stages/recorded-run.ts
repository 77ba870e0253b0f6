import { logRunEnd, thisReplica } from '../run-end-log.ts'
import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { RunStore } from '../store/run-store.ts'
import type { KeptAnswer, RunOutcome, RunStatus, TakenRun } from '../run-data.ts'
import { retriedAttempt } from '../runner/run-attempts.ts'
import { SIDECAR_INTERNAL } from '../../errors.ts'
import type { InternalErrorReporter } from '../../shared/internal-errors.ts'
import type { InterruptionReason, LabelledCounter } from '../../shared/metric-contracts.ts'
import type { ResponseCapture } from '../../shared/answer-writer.ts'
import type { AnswerTee } from '../../shared/response-sink.ts'
import { ResultCapture } from '../../webhook/result-capture.ts'
import type { WebhookTee } from '../../webhook/webhook-tee.ts'
import { CANCELED_MESSAGE, CANCELED_STATUS } from '../run-record.ts'
import { recordWebhookEnd } from '../webhooks/webhook-end.ts'

/** A sync call recorded in the run store (as it claimed its Idempotency-Key, or as its `Prefer: wait` ran out), ready to be followed. */
export interface RecordedRun {
  readonly store: RunStore
  /** The run; a call whose Prefer: wait ran out has it replaced by the run as opened, once it is (see opened). */
  run: TakenRun
  readonly logger: Logger
  /** sidecar_runs_total: the run's final status, counted once it is written. */
  readonly runsTotal: LabelledCounter<RunStatus>
  /** An exception in a store write: reported once, and the run ends failed (the caller's answer goes on). */
  readonly reportInternal: InternalErrorReporter
  /** This replica's name in its run-end line (thisReplica: HOSTNAME, else the machine's). */
  readonly replica?: string
  /** Its Idempotency-Key's slot: the answer is kept in it with the run's end, in one step (none: a call whose Prefer: wait ran out). */
  readonly slot?: string
  /** The answer the caller got, handed over as it ends (keepSyncAnswer), before the run's end is written. */
  answer?: KeptAnswer
  /** The run's end, written with the answer: settles once both are kept. */
  kept?: Promise<void>
  /** The run as the store opens it, while that is on its way (a call whose Prefer: wait ran out: with its queue entry); rejected: never recorded. */
  opened?: Promise<TakenRun> | undefined
  /** RUN_MAX_ATTEMPTS, for a run the store may queue again (a call whose Prefer: wait ran out, attempts counted, a shared store). */
  readonly maxAttempts?: number
}

/**
 * Follows a recorded call's answer: each event the caller gets is appended to the run as it goes
 * (readers of `…/events` see it live), the end finishes the record with the status and result the
 * caller got, and the call's webhook (when it asked for one) reports its delivery on the record.
 */
export class RecordedRunTee implements AnswerTee, ResponseCapture {
  /** The tee is its own capture: the sinks feed it, it feeds the result (shared with the webhook's) and the run's events. */
  readonly capture: ResponseCapture = this
  readonly #recorded: RecordedRun
  readonly #webhook: WebhookTee | undefined
  readonly #result: ResultCapture
  #forwardedAt = performance.now()
  #startedAt = Date.now()
  #events = 0
  #done = false
  /** The run's end being written (see written). */
  #written: Promise<unknown> | undefined
  /** A store write threw: the run's end says so. */
  #broken = false

  /** `since`: when its request went to the app, for a call recorded after that (performance.now() and epoch ms). */
  constructor (recorded: RecordedRun, webhook: WebhookTee | undefined, maxResultBytes: number, since?: { readonly forwardedAt: number, readonly startedAt: number }) {
    this.#recorded = recorded
    if (since !== undefined) {
      this.#forwardedAt = since.forwardedAt
      this.#startedAt = since.startedAt
    }
    this.#webhook = webhook
    this.#result = webhook?.capture ?? new ResultCapture(maxResultBytes)
    if (webhook !== undefined) webhook.onEnd = recordWebhookEnd(recorded.store.records, recorded.run.scope, recorded.run.runId, recorded.logger)
  }

  /** Settles once the run's end is written (or could not be). */
  get written (): Promise<unknown> | undefined { return this.#written }

  get status (): number { return this.#result.status }
  set status (status: number) { this.#result.status = status }

  body (chunk: Buffer): void { this.#result.body(chunk) }

  event (data: string): void {
    this.#result.event(data)
    if (this.#broken) return
    const { store, run, reportInternal } = this.#recorded
    try {
      store.records.appendEvent(run, this.#events++, data)
    } catch (error) {
      this.#broken = true
      reportInternal(error, { runId: run.runId })
    }
  }

  forwarded (): void {
    this.#forwardedAt = performance.now()
    this.#startedAt = Date.now()
    this.#webhook?.forwarded()
  }

  // the webhook first: a durable one is written down before the run's end and its answer, so a
  // caller holding the answer knows its webhook is written down too (the store runs commands in order)
  finish (): void {
    const status = this.#result.status
    const failed = status < 200 || status >= 300
    this.#webhook?.finish()
    this.#end(status, this.#result.resultJson(), failed ? `app answered ${status}` : undefined)
  }

  finishWith (status: number, body: string, interrupted?: InterruptionReason): void {
    this.#result.replace(status, body)
    const { maxAttempts, run } = this.#recorded
    if (interrupted !== undefined && maxAttempts !== undefined && !this.#done && !this.#broken) {
      // its webhook waits for the run's final outcome: sent here if it is not queued again, else by whoever runs it last
      this.#done = true
      const outcome = this.#outcome('failed', status, this.#result.resultJson(), messageOf(body), interrupted)
      const retrying = async (opened: TakenRun): Promise<boolean> => await retriedAttempt(this.#recorded.store.records, opened, outcome, maxAttempts)
        .catch((error: unknown) => {
          this.#recorded.reportInternal(error, { runId: run.runId })
          return false
        })
      // never recorded (its opening failed): nothing to queue again, its webhook still owed
      this.#written = this.#opened().then(retrying, () => false).then(async retried => {
        if (retried) {
          this.#webhook?.cancel()
          return
        }
        this.#webhook?.finishWith(status, body)
        await this.#write(outcome)
      })
      return
    }
    this.#webhook?.finishWith(status, body)
    this.#end(status, this.#result.resultJson(), messageOf(body), interrupted)
  }

  cancel (): void {
    this.#end(413, 'null', 'request body refused')
    this.#webhook?.cancel()
  }

  #end (statusCode: number, resultJson: string, error: string | undefined, interrupted?: InterruptionReason): void {
    if (this.#done) return
    this.#done = true
    if (this.#broken) {
      statusCode = SIDECAR_INTERNAL.status
      resultJson = SIDECAR_INTERNAL.body()
      error = SIDECAR_INTERNAL.message
      interrupted = undefined
    }
    // the sidecar's own 499 is a cancel (an app answering 499 ends through finish(), `app answered 499`)
    const status = error === undefined ? 'succeeded' : statusCode === CANCELED_STATUS && error === CANCELED_MESSAGE ? 'canceled' : 'failed'
    this.#written = this.#write(this.#outcome(status, statusCode, resultJson, error, interrupted))
  }

  #outcome (status: RunOutcome['status'], statusCode: number, resultJson: string, error: string | undefined, interrupted: InterruptionReason | undefined): RunOutcome {
    const outcome: RunOutcome = { status, statusCode, resultJson, runTimeMs: performance.now() - this.#forwardedAt, error, completedAt: Date.now(), startedAt: this.#startedAt }
    return interrupted === undefined ? outcome : { ...outcome, interrupted }
  }

  /** The run as opened (see RecordedRun.opened), or as it is. */
  #opened (): Promise<TakenRun> {
    return this.#recorded.opened ?? Promise.resolve(this.#recorded.run)
  }

  /** The run's end written, counted and logged (with its key's answer, for a keyed run): settles once it is. */
  #write (outcome: RunOutcome): Promise<void> {
    const recorded = this.#recorded
    const { store, logger, runsTotal } = recorded
    const keep = recorded.answer === undefined || recorded.slot === undefined ? undefined : { slot: recorded.slot, answer: recorded.answer }
    const finish = async (run: TakenRun): Promise<void> => {
      const view = await store.records.finish(run, outcome, keep)
      runsTotal.labels(view.record.status).inc()
      logRunEnd(logger, run.scope, view, thisReplica(recorded.replica))
    }
    // sent at once, unless the run's opening is still on its way
    const finishing = (recorded.opened === undefined ? finish(recorded.run) : recorded.opened.then(finish))
      .catch((failure: unknown) => { this.#notWritten(failure, recorded.run.runId) })
    if (keep !== undefined) recorded.kept = finishing
    return finishing
  }

  #notWritten (failure: unknown, runId: string): void {
    this.#recorded.logger.warn({ err: failure, runId }, 'run record not finished')
  }
}

function messageOf (body: string): string {
  try {
    const message = (JSON.parse(body) as { message?: unknown }).message
    return typeof message === 'string' ? message : body
  } catch {
    return body
  }
}
