import { DEFAULT_URGENCY } from '../../../shared/fair-queue.ts'
import type { ListRequest, RunListing, RunPage, RunPriority } from '../run-listing.ts'
import type { RunRecord, RunScope } from '../../run-data.ts'
import type { MemoryRecords } from './memory-records.ts'
import { type MemoryRuns, scopeKeyOf } from './memory-runs.ts'

/** An app's runs in this process's memory, listed from the runs' index; its queued ones canceled one by one. */
export class MemoryListing implements RunListing {
  readonly #runs: MemoryRuns
  /** Each queued run is canceled as a cancel of it would. */
  readonly #records: MemoryRecords

  constructor (runs: MemoryRuns, records: MemoryRecords) {
    this.#runs = runs
    this.#records = records
  }

  async list (scope: RunScope, request: ListRequest): Promise<RunPage> {
    const records: RunRecord[] = []
    const { statuses, limit, sub } = request
    // one more than the page: whether anything follows it
    for (const run of this.#runs.index.newestFirst(scopeKeyOf(scope), request.after)) {
      if (statuses !== undefined && !statuses.includes(run.record.status)) continue
      if (sub !== undefined && run.sub !== sub) continue
      records.push(run.record)
      if (records.length > limit) break
    }
    if (records.length <= limit) return { records, next: undefined }
    records.length = limit
    const last = records[limit - 1] as RunRecord
    return { records, next: { createdAt: Date.parse(last.created_at), runId: last.run_id } }
  }

  async cancelQueued (scope: RunScope, sub?: string): Promise<number> {
    const scopeKey = scopeKeyOf(scope)
    const queued = [...this.#runs.live.values()].filter(run => run.scopeKey === scopeKey && run.async && run.record.status === 'queued' && (sub === undefined || run.sub === sub))
    for (const run of queued) await this.#records.cancel(scope, run.record.run_id)
    return queued.length
  }

  async priorities (scope: RunScope, runIds: readonly string[]): Promise<RunPriority[]> {
    const scopeKey = scopeKeyOf(scope)
    return runIds.map(runId => {
      const key = `${scopeKey}/${runId}`
      // peek: a read for the page keeps a finished run no longer
      const run = this.#runs.live.get(key) ?? this.#runs.finished.peek(key)
      return run === undefined ? { urgency: DEFAULT_URGENCY, caller: '' } : { urgency: run.urgency, caller: run.caller }
    })
  }
}
