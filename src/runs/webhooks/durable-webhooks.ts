import type { Logger } from 'pino'
import type { DurableDeliveries } from '../store/durable-deliveries.ts'
import type { RunStore } from '../store/run-store.ts'
import type { HeldDelivery } from '../run-data.ts'
import type { DeliveryLedger, WebhookJob, WebhookSubmitter } from '../../webhook/webhook-delivery.ts'
import { whileUnavailable } from '../while-unavailable.ts'
import { recordWebhookEnd } from './webhook-end.ts'

/**
 * Durable webhook delivery (docs/routes.md, "Webhooks"). With a shared run store each
 * delivery is written down before its first attempt, each attempt counted, and forgotten when it
 * ends; a sidecar that dies (or stops before its deliveries end) leaves them to another, which
 * makes the remaining attempts. In memory, or for a job with no app, jobs go straight to the sender.
 */
export class DurableWebhooks implements WebhookSubmitter {
  readonly #store: RunStore
  readonly #sender: WebhookSubmitter
  readonly #logger: Logger

  constructor (store: RunStore, sender: WebhookSubmitter, logger: Logger) {
    this.#store = store
    this.#sender = sender
    this.#logger = logger
  }

  submit (job: WebhookJob): boolean {
    const scope = job.scope
    const deliveries = this.#store.deliveries
    if (deliveries === undefined || scope === undefined) return this.#sender.submit(job)
    deliveries.hold({ scope, runId: job.runId, target: job.target, body: job.body, trace: job.trace }).then(
      held => { this.#sender.submit({ ...job, ledger: this.#ledger(held) }) },
      (error: unknown) => {
        // the store is unreachable: delivered all the same, from this sidecar's memory only
        this.#logger.warn({ err: error, runId: job.runId }, 'webhook not written down; delivering it from memory')
        this.#sender.submit(job)
      })
    return true
  }

  /** A delivery written down and held already (with its run's end): its attempts. */
  submitHeld (job: WebhookJob, held: HeldDelivery): void {
    this.#sender.submit({ ...job, ledger: this.#ledger(held) })
  }

  /** A delivery taken over from a lost or stopped sidecar: its remaining attempts, its end on the run's record (when it has one). */
  resume (held: HeldDelivery): void {
    const { scope, runId } = held
    this.#logger.info({ runId, attempts: held.attempts }, 'webhook taken over from another replica')
    this.#sender.submit({
      target: held.target,
      runId,
      body: held.body,
      scope,
      trace: held.trace,
      ledger: this.#ledger(held),
      // a plain call's delivery has no record: nothing to update, nothing to log
      onEnd: recordWebhookEnd(this.#store.records, scope, runId)
    })
  }

  #ledger (held: HeldDelivery): DeliveryLedger {
    // a held delivery comes only from a store that holds deliveries
    const deliveries = this.#store.deliveries as DurableDeliveries
    const quietly = async (step: Promise<void>): Promise<void> => { await step.catch(() => {}) }
    // a fresh delivery's first attempt was counted as it was held
    let counted = held.attempts === 0
    return {
      attemptsMade: held.attempts,
      attempt: async () => {
        if (counted) { counted = false; return }
        await quietly(deliveries.attempt(held))
      },
      // its end written even through an outage of the store: left pending there, another sidecar would deliver it again
      done: async () => { await quietly(whileUnavailable(async () => { await deliveries.done(held) })) },
      leave: async stopping => { await quietly(deliveries.leave(held, stopping)) }
    }
  }
}
