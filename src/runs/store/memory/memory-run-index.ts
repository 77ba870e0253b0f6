import type { ListPosition } from '../run-listing.ts'

/** A run as the index orders it: its key and add order, not the run (a run dropped or evicted is not kept alive by the index). */
export interface IndexedRun extends ListPosition {
  readonly key: string
  /** Which run of that key (a run id may be recorded again once the first is gone). */
  readonly seq: number
}

/** Fewest entries a scope's index holds before a sweep is worth it. */
const MIN_SWEEP = 64

/** -1, 0, 1: `a` before, at, after `b` (oldest first: created_at, then run id, as Redis orders equal scores). */
function comparePositions (a: ListPosition, b: ListPosition): number {
  if (a.createdAt !== b.createdAt) return a.createdAt < b.createdAt ? -1 : 1
  return a.runId === b.runId ? 0 : a.runId < b.runId ? -1 : 1
}

/**
 * Each scope's runs in creation order, for listing them (newest first) without a sort per request.
 * Runs no longer held (expired, dropped) are swept out as the index doubles: it stays within
 * twice the runs held.
 */
export class MemoryRunIndex<Run> {
  readonly #find: (entry: IndexedRun) => Run | undefined
  readonly #scopes = new Map<string, { entries: IndexedRun[], sweepAt: number }>()

  /** `find`: the run an entry names while the store holds it (a run gone is skipped, then swept). */
  constructor (find: (entry: IndexedRun) => Run | undefined) {
    this.#find = find
  }

  add (scopeKey: string, entry: IndexedRun): void {
    let scope = this.#scopes.get(scopeKey)
    if (scope === undefined) {
      scope = { entries: [], sweepAt: MIN_SWEEP }
      this.#scopes.set(scopeKey, scope)
    }
    const { entries } = scope
    // runs come nearly in order: the place is found from the end
    let at = entries.length
    while (at > 0 && comparePositions(entries[at - 1] as ListPosition, entry) > 0) at--
    entries.splice(at, 0, entry)
    if (entries.length >= scope.sweepAt) {
      const kept = entries.filter(indexed => this.#find(indexed) !== undefined)
      scope.entries = kept
      scope.sweepAt = Math.max(MIN_SWEEP, 2 * kept.length)
      if (kept.length === 0) this.#scopes.delete(scopeKey)
    }
  }

  /** The scope's runs still held, newest first, from just after `after` (or the newest). */
  * newestFirst (scopeKey: string, after: ListPosition | undefined): Generator<Run> {
    const entries = this.#scopes.get(scopeKey)?.entries ?? []
    let i = entries.length - 1
    if (after !== undefined) {
      // the last entry before `after`
      let low = 0
      let high = entries.length
      while (low < high) {
        const mid = (low + high) >>> 1
        if (comparePositions(entries[mid] as ListPosition, after) < 0) low = mid + 1
        else high = mid
      }
      i = low - 1
    }
    for (; i >= 0; i--) {
      const run = this.#find(entries[i] as IndexedRun)
      if (run !== undefined) yield run
    }
  }
}
