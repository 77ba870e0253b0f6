import { performance } from 'node:perf_hooks'
import type { AnswerTee } from '../shared/response-sink.ts'
import { roundedMs } from '../shared/run-result.ts'
import type { TraceContext } from '../shared/trace-contracts.ts'
import type { DeliveryResult, WebhookJob, WebhookSubmitter } from './webhook-delivery.ts'
import { ResultCapture, webhookBody } from './result-capture.ts'
import type { WebhookTarget } from './webhook-endpoint.ts'

/**
 * The webhook side of one call: sinks feed it the body or the events as they go to the caller
 * (never slowing them), and when the call ends it hands one delivery to the sender.
 */
export class WebhookTee implements AnswerTee {
  readonly capture: ResultCapture
  /** Told how the delivery ended (a recorded run keeps it on its record). */
  onEnd: ((result: DeliveryResult | 'dropped', attempts: number) => void) | undefined
  readonly #target: WebhookTarget
  readonly #runId: string
  readonly #sender: WebhookSubmitter
  readonly #scope: WebhookJob['scope']
  readonly #trace: TraceContext | undefined
  #forwardedAt = 0
  #done = false

  constructor (target: WebhookTarget, runId: string, maxBytes: number, sender: WebhookSubmitter, scope?: WebhookJob['scope'], trace?: TraceContext) {
    this.capture = new ResultCapture(maxBytes)
    this.#target = target
    this.#runId = runId
    this.#sender = sender
    this.#scope = scope
    this.#trace = trace
  }

  /** The request went to the app now (run_time_ms counts from here). */
  forwarded (): void { this.#forwardedAt = performance.now() }

  /** The response is over: deliver what the caller got. */
  finish (): void {
    if (this.#done) return
    this.#done = true
    const runTimeMs = roundedMs(performance.now() - this.#forwardedAt)
    const body = webhookBody(this.#runId, this.capture, runTimeMs, new Date().toISOString())
    this.#sender.submit({ target: this.#target, runId: this.#runId, body, onEnd: this.onEnd, scope: this.#scope, trace: this.#trace })
  }

  /** The caller got the sidecar's own answer instead (a 502, a 504): deliver that. */
  finishWith (status: number, body: string): void {
    this.capture.replace(status, body)
    this.finish()
  }

  /** The call was refused before the app could answer it (413): no webhook. */
  cancel (): void { this.#done = true }
}
