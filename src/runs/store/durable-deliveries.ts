import type { HeldDelivery, NewDelivery } from '../run-data.ts'

/**
 * Durable webhook delivery (a shared store only): a delivery is written down before its first
 * attempt and held (heartbeats, as for runs); should its sidecar die, another makes the remaining
 * attempts. Every method rejects with RunStoreUnavailableError while the backend cannot be reached.
 */
export interface DurableDeliveries {
  /** Writes the delivery down before its first attempt and holds it. */
  hold: (delivery: NewDelivery) => Promise<HeldDelivery>
  /** An attempt of a held delivery begins, other than a fresh one's first (counted first: a sidecar dying mid-attempt has used it). */
  attempt: (delivery: HeldDelivery) => Promise<void>
  /** A held delivery ended (delivered, or failed for good): forgotten, its secret with it. */
  done: (delivery: HeldDelivery) => Promise<void>
  /**
   * The delivery is left for whichever sidecar looks next (it is idle as a lost one's): SIGTERM's
   * grace period is over (`stopping`: this store takes none over from then on), or this sidecar's
   * bounds are full (it may take it back itself at its next heartbeat).
   */
  leave: (delivery: HeldDelivery, stopping: boolean) => Promise<void>
}
