import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { RunStore, TakenRun } from '../runs/run-store.ts'
import type { AnswerTee, ResponseCapture } from '../shared/response-sink.ts'
import { WebhookCapture } from '../webhook/webhook-capture.ts'
import type { WebhookTee } from '../webhook/webhook-tee.ts'
import type { HeldKey } from './idempotent-call.ts'
import type { HttpCall } from './http-call.ts'
import type { CallRoute } from './match-route.ts'
import type { WebhookRequest } from './webhook-request.ts'

/** A sync call recorded in the run store (it carries an Idempotency-Key), ready to be followed. */
export interface RecordedCall {
  readonly store: RunStore
  readonly run: TakenRun
  readonly logger: Logger
}

/**
 * The record stage of a sync call with an Idempotency-Key: its run record, running from now on
 * (`GET …/_runs/{id}` on any replica sharing the store). 409 when its run id is taken, 503 when
 * the store cannot be reached (the key is freed either way: the app was not called).
 */
export async function recordCall (store: RunStore, logger: Logger, call: HttpCall, route: CallRoute, key: HeldKey, webhook: WebhookRequest | undefined): Promise<RecordedCall> {
  const run = await store.record({
    scope: key.scope,
    runId: call.runId,
    // a sync run is never run again: its request is not kept
    request: { method: call.req.method as string, path: route.appPath, headers: [], body: null },
    webhook: webhook === undefined ? undefined : { url: webhook.url.href, secret: undefined },
    createdAt: key.claimedAt
  }, Date.now())
  return { store, run, logger }
}

/**
 * Follows a recorded call's answer: each event the caller gets is appended to the run as it goes
 * (readers of `…/events` see it live), the end finishes the record with the status and result the
 * caller got, and the call's webhook (when it asked for one) reports its delivery on the record.
 */
export class RecordedRunTee implements AnswerTee {
  readonly capture: ResponseCapture
  readonly #recorded: RecordedCall
  readonly #webhook: WebhookTee | undefined
  readonly #result: WebhookCapture
  #forwardedAt = performance.now()
  #events = 0
  #done = false

  constructor (recorded: RecordedCall, webhook: WebhookTee | undefined, maxResultBytes: number) {
    this.#recorded = recorded
    this.#webhook = webhook
    const result = webhook?.capture ?? new WebhookCapture(maxResultBytes)
    this.#result = result
    const { store, run } = recorded
    this.capture = {
      get status () { return result.status },
      set status (status: number) { result.status = status },
      body: chunk => { result.body(chunk) },
      event: data => {
        result.event(data)
        store.appendEvent(run, this.#events++, data)
      }
    }
    if (webhook !== undefined) {
      webhook.onEnd = (delivery, attempts) => {
        store.webhookDone(run.scope, run.runId, delivery === 'delivered' ? 'delivered' : 'failed', attempts).catch((error: unknown) => {
          recorded.logger.warn({ err: error, runId: run.runId }, 'webhook result not recorded')
        })
      }
    }
  }

  forwarded (): void {
    this.#forwardedAt = performance.now()
    this.#webhook?.forwarded()
  }

  finish (): void {
    const status = this.#result.status
    const failed = status < 200 || status >= 300
    this.#end(status, this.#result.resultJson(), failed ? `app answered ${status}` : undefined)
    this.#webhook?.finish()
  }

  finishWith (status: number, body: string): void {
    this.#result.replace(status, body)
    this.#end(status, this.#result.resultJson(), messageOf(body))
    this.#webhook?.finishWith(status, body)
  }

  cancel (): void {
    this.#end(413, 'null', 'request body refused')
    this.#webhook?.cancel()
  }

  #end (statusCode: number, resultJson: string, error: string | undefined): void {
    if (this.#done) return
    this.#done = true
    const { store, run, logger } = this.#recorded
    const runTimeMs = performance.now() - this.#forwardedAt
    store.finish(run, { status: error === undefined ? 'succeeded' : 'failed', statusCode, resultJson, runTimeMs, error, completedAt: Date.now() })
      .catch((failure: unknown) => { logger.warn({ err: failure, runId: run.runId }, 'run record not finished') })
  }
}

/** The call ended before it was forwarded (its caller left, its deadline passed): the record fails with the status the call got. */
export function abandonRecordedCall (recorded: RecordedCall, status: number): void {
  const { store, run, logger } = recorded
  const error = status === 504 ? 'deadline exceeded' : 'caller disconnected'
  store.finish(run, { status: 'failed', statusCode: status, resultJson: JSON.stringify({ message: error }), runTimeMs: 0, error, completedAt: Date.now() })
    .catch((failure: unknown) => { logger.warn({ err: failure, runId: run.runId }, 'run record not finished') })
}

function messageOf (body: string): string {
  try {
    const message = (JSON.parse(body) as { message?: unknown }).message
    return typeof message === 'string' ? message : body
  } catch {
    return body
  }
}
