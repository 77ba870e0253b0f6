import { LRUCache } from 'lru-cache'
import { DEFAULT_URGENCY, URGENCY_LEVELS } from '../../../shared/fair-queue.ts'
import type { LongTimer } from '../../../shared/longest-timer.ts'
import type { WebhookTarget } from '../../../webhook/webhook-endpoint.ts'
import { RunIdTakenError, RunNotFoundError } from '../../../errors.ts'
import type { RunStoreListener, RunStoreSettings } from '../run-store.ts'
import type { NewRun, RunRecord, RunScope, RunView } from '../../run-data.ts'
import { MemoryRunIndex } from './memory-run-index.ts'

/** One run as this process keeps it. */
export interface MemoryRun {
  readonly key: string
  readonly scopeKey: string
  /** What was submitted (its request is handed to the taker); dropped when the run ends, its body with it. */
  submitted: NewRun | undefined
  /** Order of submission across scopes (oldest first). */
  readonly seq: number
  /** Its `Priority` urgency (0–7) and caller: its place in the queue. */
  readonly urgency: number
  readonly caller: string
  /** The `sub` that submitted it (RUN_ACCESS). */
  readonly sub: string
  record: RunRecord
  resultJson: string | undefined
  webhook: WebhookTarget | undefined
  /** Handed out by take() and not released (a recorded sync run: always). */
  taken: boolean
  /** Submitted async (a recorded sync call is not). */
  readonly async: boolean
  /** Events; `events[i]` is event `dropped + i`; the first `trimmed` of them are no longer kept (emptied, spliced off in batches). */
  events: string[]
  /** Events spliced off before events[0]. */
  dropped: number
  /** Events at the head of `events` no longer kept (RUN_MAX_EVENTS, RUN_MAX_EVENT_BYTES). */
  trimmed: number
  /** UTF-8 bytes of the events kept. */
  eventBytes: number
  /** Request-body bytes it counts in its app's ASYNC_QUEUE_MAX_BYTES while it waits (0 once started or canceled). */
  queuedBytes: number
  /** Followers waiting for the next event or the end. */
  readonly waiters: Set<() => void>
  /** A queued run's time limit (`Cancel-After`, ASYNC_QUEUE_TTL_SECONDS): cleared as it starts or ends. */
  expiry: LongTimer | undefined
}

/** Finished runs kept for RUN_RETENTION_SECONDS, at most this many bytes of results and events (then the oldest go first). */
const FINISHED_BYTES = 256 * 1024 * 1024
/** What a finished run costs beside its result and events, and each event beside its bytes. */
const RUN_OVERHEAD = 512
const EVENT_OVERHEAD = 16
/** Trimmed events are spliced off in batches (a splice per event would be quadratic). */
const SPLICE_BATCH = 1024

const sizeOf = (run: MemoryRun): number => RUN_OVERHEAD + (run.resultJson?.length ?? 0) + run.eventBytes + EVENT_OVERHEAD * (run.events.length - run.trimmed)

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
  /** Queued runs not started, by urgency (sidecar_async_queued_runs_by_urgency). */
  readonly waitingByUrgency: number[] = new Array<number>(URGENCY_LEVELS).fill(0)
  /** Request-body bytes of queued runs not started, per scope (ASYNC_QUEUE_MAX_BYTES). */
  readonly waitingBytes = new Map<string, number>()
  /** Each scope's runs in creation order (listing); a run expired or dropped is skipped, then swept. */
  readonly index = new MemoryRunIndex<MemoryRun>(({ key, seq }) => {
    const run = this.live.get(key) ?? this.finished.peek(key)
    return run?.seq === seq ? run : undefined
  })
  listener: RunStoreListener | undefined
  closed = false
  #seq = 0

  constructor (settings: RunStoreSettings) {
    this.settings = settings
    this.finished = new LRUCache<string, MemoryRun>({
      ttl: settings.retentionSeconds * 1000,
      maxSize: FINISHED_BYTES,
      sizeCalculation: sizeOf
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
      key, scopeKey, submitted: run, seq: this.#seq++, urgency: run.urgency ?? DEFAULT_URGENCY, caller: run.caller ?? '', sub: run.sub ?? '', record, resultJson: undefined,
      webhook: run.webhook, taken: !async, async, events: [], dropped: 0, trimmed: 0, eventBytes: 0, queuedBytes: 0, waiters: new Set(), expiry: undefined
    }
    this.live.set(key, stored)
    this.index.add(scopeKey, { createdAt: run.createdAt, runId: run.runId, key, seq: stored.seq })
    return stored
  }

  /** One more queued run waits (`delta` 1: submitted), or one fewer (-1: started, canceled, expired). */
  countWaiting (run: MemoryRun, delta: 1 | -1): void {
    this.waiting.set(run.scopeKey, (this.waiting.get(run.scopeKey) ?? 0) + delta)
    this.waitingByUrgency[run.urgency] = (this.waitingByUrgency[run.urgency] ?? 0) + delta
  }

  /** A queued run's body counts in its scope's ASYNC_QUEUE_MAX_BYTES until it starts or is canceled. */
  countQueued (run: MemoryRun, bytes: number): void {
    run.queuedBytes = bytes
    this.waitingBytes.set(run.scopeKey, (this.waitingBytes.get(run.scopeKey) ?? 0) + bytes)
  }

  /** The run no longer waits (started, canceled): its body's bytes go back to its scope's bound. */
  uncountQueued (run: MemoryRun): void {
    if (run.queuedBytes === 0) return
    this.waitingBytes.set(run.scopeKey, (this.waitingBytes.get(run.scopeKey) ?? run.queuedBytes) - run.queuedBytes)
    run.queuedBytes = 0
  }

  /** Keeps the run's next event; the oldest go past RUN_MAX_EVENTS or RUN_MAX_EVENT_BYTES (the newest always stays). */
  keepEvent (run: MemoryRun, data: string): void {
    run.events.push(data)
    run.eventBytes += Buffer.byteLength(data)
    const { maxEvents, maxEventBytes } = this.settings
    while (run.events.length - run.trimmed > 1 && (run.events.length - run.trimmed > maxEvents || run.eventBytes > maxEventBytes)) this.#trimOne(run)
    if (run.trimmed >= SPLICE_BATCH) this.#splice(run)
  }

  find (scope: RunScope, runId: string): MemoryRun {
    const key = `${scopeKeyOf(scope)}/${runId}`
    const run = this.live.get(key) ?? this.finished.get(key)
    if (run === undefined) throw new RunNotFoundError()
    return run
  }

  /** The first event a reader may still get. */
  firstKept (run: MemoryRun): number {
    return run.dropped + run.trimmed
  }

  /**
   * A finished run leaves the live map for the retention cache; its followers hear of the end.
   * One larger than the cache's whole budget is cut to fit (its oldest events, then its result)
   * rather than dropped at once, and the listener is told.
   */
  retire (run: MemoryRun): void {
    this.live.delete(run.key)
    run.expiry?.clear()
    this.uncountQueued(run)
    run.submitted = undefined // nothing reads a finished run's request: its body would be kept for RUN_RETENTION_SECONDS, uncounted by the byte budget
    const first = this.firstKept(run)
    while (sizeOf(run) > FINISHED_BYTES && run.events.length > run.trimmed) this.#trimOne(run)
    const cut = this.firstKept(run) > first ? [`events before ${this.firstKept(run)}`] : []
    if (sizeOf(run) > FINISHED_BYTES) {
      run.resultJson = 'null'
      cut.push('the result')
    }
    this.#splice(run)
    if (cut.length > 0) {
      const [projectId, appName] = run.scopeKey.split('/') as [string, string]
      this.listener?.truncated?.({ projectId, appName }, run.record.run_id, `${cut.join(' and ')} cut to fit the finished runs' memory budget`)
    }
    this.finished.set(run.key, run)
    wake(run)
  }

  /** The oldest kept event is no longer kept: its string is freed now, its slot spliced off later. */
  #trimOne (run: MemoryRun): void {
    run.eventBytes -= Buffer.byteLength(run.events[run.trimmed] as string)
    run.events[run.trimmed] = ''
    run.trimmed++
  }

  #splice (run: MemoryRun): void {
    if (run.trimmed === 0) return
    run.events.splice(0, run.trimmed)
    run.dropped += run.trimmed
    run.trimmed = 0
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
  return { record: run.record, resultJson: run.resultJson, async: run.async, sub: run.sub }
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
