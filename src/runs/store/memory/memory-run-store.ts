import type { RunStore, RunStoreListener, RunStoreSettings } from '../run-store.ts'
import { MemoryKeyClaims } from './memory-key-claims.ts'
import { MemoryListing } from './memory-listing.ts'
import { MemoryQueue } from './memory-queue.ts'
import { MemoryRecords } from './memory-records.ts'
import { MemoryRuns } from './memory-runs.ts'

/**
 * The run store in this process's memory (RUN_STORE_URL unset): one sidecar, nothing to
 * install. Queued and running runs are held until they end; finished ones for RUN_RETENTION_SECONDS
 * within a byte budget. Nothing survives the process.
 */
export class MemoryRunStore implements RunStore {
  readonly backend = 'memory'
  readonly available = true
  readonly queue: MemoryQueue
  readonly records: MemoryRecords
  readonly keys: MemoryKeyClaims
  readonly listing: MemoryListing
  /** In memory, webhook delivery is as it always was: nothing is written down. */
  readonly deliveries = undefined
  readonly #runs: MemoryRuns

  constructor (settings: RunStoreSettings) {
    this.#runs = new MemoryRuns(settings)
    this.queue = new MemoryQueue(this.#runs)
    this.keys = new MemoryKeyClaims(this.#runs)
    this.records = new MemoryRecords(this.#runs, this.keys)
    this.listing = new MemoryListing(this.#runs, this.records)
  }

  /** In memory, this sidecar is the only one. */
  async cancelCall (): Promise<boolean> { return false }

  listen (listener: RunStoreListener): void { this.#runs.listener = listener }

  async close (): Promise<void> {
    this.queue.close()
    this.#runs.close()
  }
}
