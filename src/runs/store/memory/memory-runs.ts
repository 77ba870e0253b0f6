import { LRUCache } from 'lru-cache'
import type { WebhookTarget } from '../../../webhook/webhook-endpoint.ts'
import { RunIdTakenError, RunNotFoundError } from '../../../errors.ts'
import type { NewRun, RunRecord, RunScope, RunStoreListener, RunStoreSettings, RunView } from '../run-store.ts'

/** One run as this process keeps it. */
export interface MemoryRun {
  readonly key: string
  readonly scopeKey: string
  /** What was submitted (its request is handed to the taker); dropped when the run ends, its body with it. */
  submitted: NewRun | undefined
  /** Order of submission across scopes (oldest first). */
  readonly seq: number
  record: RunRecord
  resultJson: string | undefined
  webhook: WebhookTarget | undefined
  /** Handed out by take() and not released (a recorded sync run: always). */
  taken: boolean
  /** Submitted async (a recorded sync call is not). */
  readonly async: boolean
  /** Events kept; `events[i]` is event `dropped + i`. */
  events: string[]
  /** Events trimmed away (RUN_MAX_EVENTS) before events[0]. */
  dropped: number
  /** Followers waiting for the next event or the end. */
  readonly waiters: Set<() => void>
}

/** Finished runs kept for RUN_RETENTION_SECONDS, at most this many bytes of results and events (then the oldest go first). */
const FINISHED_BYTES = 256 * 1024 * 1024

/**
 * The runs this process holds, as the memory store's queue, records and key claims share them:
 * queued and running runs until they end, finished ones for RUN_RETENTION_SECONDS within a byte
 * budget, and the followers waiting on them.
 */
export class MemoryRuns {
  readonly settings: RunStoreSettings
  readonly live = new Map<string, MemoryRun>()
  readonly finished: LRUCache<string, MemoryRun>
  /** Queued runs not taken, per scope (ASYNC_QUEUE_DEPTH, sidecar_async_queued_runs). */
  readonly waiting = new Map<string, number>()
  listener: RunStoreListener | undefined
  closed = false
  #seq = 0

  constructor (settings: RunStoreSettings) {
    this.settings = settings
    this.finished = new LRUCache<string, MemoryRun>({
      ttl: settings.retentionSeconds * 1000,
      maxSize: FINISHED_BYTES,
      sizeCalculation: run => 512 + (run.resultJson?.length ?? 0) + run.events.reduce((sum, data) => sum + data.length + 16, 0)
    })
  }

  /** Rejects a run whose id its scope already holds (RunIdTakenError). */
  refuseTaken (run: NewRun): void {
    const key = keyOf(run)
    if (this.live.has(key) || this.finished.has(key)) throw new RunIdTakenError()
  }

  /** Holds a new run: an async one queued (not taken), a recorded sync one running (taken for good). */
  add (run: NewRun, record: RunRecord, async: boolean): MemoryRun {
    const scopeKey = scopeKeyOf(run.scope)
    const key = `${scopeKey}/${run.runId}`
    const stored: MemoryRun = {
      key, scopeKey, submitted: run, seq: this.#seq++, record, resultJson: undefined,
      webhook: run.webhook, taken: !async, async, events: [], dropped: 0, waiters: new Set()
    }
    this.live.set(key, stored)
    return stored
  }

  find (scope: RunScope, runId: string): MemoryRun {
    const key = `${scopeKeyOf(scope)}/${runId}`
    const run = this.live.get(key) ?? this.finished.get(key)
    if (run === undefined) throw new RunNotFoundError()
    return run
  }

  /** The first event a reader may still get: the store trims in batches, readers see at most maxEvents. */
  firstKept (run: MemoryRun): number {
    return Math.max(run.dropped, run.dropped + run.events.length - this.settings.maxEvents)
  }

  /** A finished run leaves the live map for the retention cache; its followers hear of the end. */
  retire (run: MemoryRun): void {
    this.live.delete(run.key)
    run.submitted = undefined // nothing reads a finished run's request: its body would be kept for RUN_RETENTION_SECONDS, uncounted by the byte budget
    const first = this.firstKept(run)
    run.events = run.events.slice(first - run.dropped)
    run.dropped = first
    this.finished.set(run.key, run)
    wake(run)
  }

  /** Ends every follower. */
  close (): void {
    this.closed = true
    for (const run of this.live.values()) wake(run)
  }
}

export const scopeKeyOf = (scope: RunScope): string => `${scope.projectId}/${scope.appName}`
export const keyOf = (run: NewRun): string => `${scopeKeyOf(run.scope)}/${run.runId}`

export function viewOf (run: MemoryRun): RunView {
  return { record: run.record, resultJson: run.resultJson, async: run.async }
}

export function wake (run: MemoryRun): void {
  if (run.waiters.size === 0) return
  const waiters = [...run.waiters]
  run.waiters.clear()
  for (const resolve of waiters) resolve()
}

/** Resolves at the run's next event or end, or when `signal` aborts. */
export async function changeOf (run: MemoryRun, signal: AbortSignal): Promise<void> {
  await new Promise<void>(resolve => {
    const done = (): void => {
      run.waiters.delete(done)
      signal.removeEventListener('abort', done)
      resolve()
    }
    run.waiters.add(done)
    signal.addEventListener('abort', done, { once: true })
  })
}
