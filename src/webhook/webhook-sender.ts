import { setMaxListeners } from 'node:events'
import type { Logger } from 'pino'
import type { WebhookMetrics } from '../shared/metric-contracts.ts'
import type { WebhookDelivery, WebhookJob, WebhookSubmitter } from './webhook-delivery.ts'

export interface WebhookSenderLimits {
  /** Most deliveries pending (in progress or waiting to retry) at once. */
  readonly maxPending: number
  /** Most bytes of webhook bodies pending at once. */
  readonly maxPendingBytes: number
}

/**
 * Bytes of webhook bodies pending at once. The memory budget of the default bounds, beside a ~75 MB
 * idle sidecar under the 256 MiB limit of deploy/hello-app-deployment.yaml: 1000 deliveries (WEBHOOK_MAX_PENDING)
 * × ~7 KB of heap each besides the body ≈ 7 MB (more, briefly, when their attempts time out
 * together: under bench/webhook-flood.ts, whose call traffic alone takes RSS to ~130 MB, the peak
 * is ~190 MB with 1000 pending and ~450 MB with 10,000), plus 32 MiB of bodies (UTF-8 bytes, never
 * fewer than V8 keeps) and at most as much again while attempts hold their encoded copy.
 */
export const MAX_PENDING_BYTES = 32 * 1024 * 1024

/** The bounds for `maxPending` deliveries (WEBHOOK_MAX_PENDING). */
export function senderLimits (maxPending: number): WebhookSenderLimits {
  return { maxPending, maxPendingBytes: MAX_PENDING_BYTES }
}

/**
 * Runs deliveries in the background, bounded in number and bytes: a webhook that would pass a
 * bound is dropped at once (logged and counted), never queued without limit. On shutdown,
 * pending deliveries get the grace period; the ones left are aborted and logged one by one.
 */
export class WebhookSender implements WebhookSubmitter {
  readonly #delivery: WebhookDelivery
  readonly #limits: WebhookSenderLimits
  readonly #metrics: WebhookMetrics
  readonly #logger: Logger
  readonly #abort = new AbortController()
  readonly #pending = new Set<Promise<unknown>>()
  #pendingBytes = 0

  constructor (delivery: WebhookDelivery, metrics: WebhookMetrics, logger: Logger, limits: WebhookSenderLimits) {
    this.#delivery = delivery
    this.#limits = limits
    this.#metrics = metrics
    this.#logger = logger
    // every pending delivery listens on this one signal while it waits to retry: not a leak
    setMaxListeners(limits.maxPending + 1, this.#abort.signal)
  }

  get pending (): number { return this.#pending.size }

  /** Starts delivering `job` in the background; false when it was dropped (bounds, or shutting down). */
  submit (job: WebhookJob): boolean {
    const bytes = Buffer.byteLength(job.body)
    if (this.#abort.signal.aborted || this.#pending.size >= this.#limits.maxPending ||
        this.#pendingBytes + bytes > this.#limits.maxPendingBytes) {
      this.#metrics.webhookDeliveries.labels('dropped').inc()
      this.#logger.warn({ runId: job.runId, host: job.target.url.host, pending: this.#pending.size, pendingBytes: this.#pendingBytes }, 'webhook dropped')
      if (job.ledger !== undefined) void job.ledger.leave(this.#abort.signal.aborted) // written down: taken over later, here or elsewhere
      else job.onEnd?.('dropped', 0)
      return false
    }
    this.#pendingBytes += bytes
    const delivery = this.#delivery.deliver(job, this.#abort.signal).finally(() => {
      this.#pending.delete(delivery)
      this.#pendingBytes -= bytes
    })
    this.#pending.add(delivery)
    return true
  }

  /**
   * Waits for pending deliveries until `deadline` settles; then aborts the rest, each logged with
   * outcome `shutdown`. True when nothing had to be aborted. New webhooks are dropped from now on.
   */
  async drain (deadline: Promise<unknown>): Promise<boolean> {
    if (this.#abort.signal.aborted) return this.#pending.size === 0
    let expired = false
    void deadline.then(() => { expired = true })
    while (this.#pending.size > 0 && !expired) {
      await Promise.race([Promise.race(this.#pending), deadline])
    }
    const clean = this.#pending.size === 0
    this.#abort.abort()
    await Promise.allSettled([...this.#pending])
    await this.#delivery.close()
    return clean
  }
}
