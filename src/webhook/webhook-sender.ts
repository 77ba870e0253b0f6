import { setMaxListeners } from 'node:events'
import type { Logger } from 'pino'
import type { SidecarMetrics } from '../sidecar/metrics.ts'
import type { WebhookDelivery, WebhookJob } from './webhook-delivery.ts'

export interface WebhookSenderLimits {
  /** Most deliveries pending (in progress or waiting to retry) at once. */
  readonly maxPending: number
  /** Most bytes of webhook bodies pending at once. */
  readonly maxPendingBytes: number
}

export const DEFAULT_SENDER_LIMITS: WebhookSenderLimits = { maxPending: 10_000, maxPendingBytes: 256 * 1024 * 1024 }

/**
 * Runs deliveries in the background, bounded in number and bytes: a webhook that would pass a
 * bound is dropped at once (logged and counted), never queued without limit. On shutdown,
 * pending deliveries get the grace period; the ones left are aborted and logged one by one.
 */
export class WebhookSender {
  readonly #delivery: WebhookDelivery
  readonly #limits: WebhookSenderLimits
  readonly #metrics: SidecarMetrics
  readonly #logger: Logger
  readonly #abort = new AbortController()
  readonly #pending = new Set<Promise<unknown>>()
  #pendingBytes = 0

  constructor (delivery: WebhookDelivery, metrics: SidecarMetrics, logger: Logger, limits: WebhookSenderLimits = DEFAULT_SENDER_LIMITS) {
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
      this.#logger.warn({ runId: job.runId, host: job.url.host, pending: this.#pending.size, pendingBytes: this.#pendingBytes }, 'webhook dropped')
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
