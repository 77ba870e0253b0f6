import { LRUCache } from 'lru-cache'
import { AsyncQueueFullError, EventBeyondLastError, RunFinishedError, RunIdTakenError, RunNotAsyncError, RunNotFoundError } from '../../errors.ts'
import { canceledRecord, finishedRecord, isFinished, queuedRecord, startedRecord, withWebhook } from '../run-record.ts'
import type {
  HeldDelivery, KeptAnswer, KeyAnswer, KeyClaim, KeyEntry, NewDelivery, NewRun, RunEventItem, RunOutcome, RunRecord, RunScope, RunStore, RunStoreListener, RunStoreSettings,
  RunView, StoredWebhook, TakenRun, WebhookStatus
} from './run-store.ts'

/** One run as this process keeps it. */
interface MemoryRun {
  readonly key: string
  readonly scopeKey: string
  /** What was submitted (its request is handed to the taker); dropped when the run ends, its body with it. */
  submitted: NewRun | undefined
  /** Order of submission across scopes (oldest first). */
  readonly seq: number
  record: RunRecord
  resultJson: string | undefined
  webhook: StoredWebhook | undefined
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

interface Taker {
  resolve: (run: TakenRun) => void
  reject: (error: unknown) => void
  signal: AbortSignal
  abandon: () => void
}

/** Finished runs kept for RUN_RETENTION_SECONDS, at most this many bytes of results and events (then the oldest go first). */
const FINISHED_BYTES = 256 * 1024 * 1024
/** Kept answers of Idempotency-Keys, at most this many bytes (then the oldest go first; a claim still running is never dropped). */
const ANSWER_BYTES = 64 * 1024 * 1024

/**
 * The run store in this process's memory (RUN_STORE_URL unset): one sidecar, nothing to
 * install. Queued and running runs are held until they end; finished ones for RUN_RETENTION_SECONDS
 * within a byte budget. Nothing survives the process.
 */
export class MemoryRunStore implements RunStore {
  readonly shared = false
  readonly available = true
  readonly #settings: RunStoreSettings
  readonly #live = new Map<string, MemoryRun>()
  readonly #finished: LRUCache<string, MemoryRun>
  /** Queued (not taken) runs per scope, in submission order; canceled ones are skipped when met. */
  readonly #queues = new Map<string, MemoryRun[]>()
  readonly #waiting = new Map<string, number>()
  /** Idempotency-Key slots whose first request still runs (held until it answers or frees them), and the answered ones. */
  readonly #claims = new Map<string, KeyEntry>()
  readonly #answers: LRUCache<string, KeyEntry>
  #takers: Taker[] = []
  #seq = 0
  #listener: RunStoreListener | undefined
  #closed = false

  constructor (settings: RunStoreSettings) {
    this.#settings = settings
    this.#finished = new LRUCache<string, MemoryRun>({
      ttl: settings.retentionSeconds * 1000,
      maxSize: FINISHED_BYTES,
      sizeCalculation: run => 512 + (run.resultJson?.length ?? 0) + run.events.reduce((sum, data) => sum + data.length + 16, 0)
    })
    this.#answers = new LRUCache<string, KeyEntry>({
      ttl: settings.retentionSeconds * 1000,
      maxSize: ANSWER_BYTES,
      sizeCalculation: entry => 256 + (entry.answer?.body.length ?? 0)
    })
  }

  async claimKey (scope: RunScope, slot: string, claim: KeyClaim, run?: TakenRun): Promise<KeyEntry | undefined> {
    const key = `${scopeKeyOf(scope)}/${slot}`
    const running = this.#claims.get(key)
    if (running !== undefined) return running
    const answered = this.#answers.get(key)
    if (answered !== undefined) return answered
    if (run !== undefined) this.#record(run)
    this.#claims.set(key, { ...claim, answer: undefined })
    return undefined
  }

  async keepAnswer (scope: RunScope, slot: string, runId: string, answer: KeptAnswer): Promise<void> {
    const key = `${scopeKeyOf(scope)}/${slot}`
    const claim = this.#claims.get(key)
    if (claim?.runId !== runId) return
    this.#claims.delete(key)
    this.#answers.set(key, { runId, digest: claim.digest, async: claim.async, answer })
  }

  async dropKey (scope: RunScope, slot: string, runId: string, forgetRun = false): Promise<void> {
    const key = `${scopeKeyOf(scope)}/${slot}`
    if (this.#claims.get(key)?.runId !== runId) return
    this.#claims.delete(key)
    const run = this.#live.get(`${scopeKeyOf(scope)}/${runId}`)
    if (forgetRun && run !== undefined && !run.async) this.#live.delete(run.key)
  }

  /** A sync call with an Idempotency-Key, recorded running as its key is claimed. */
  #record (run: TakenRun): void {
    const scopeKey = scopeKeyOf(run.scope)
    const key = `${scopeKey}/${run.runId}`
    if (this.#live.has(key) || this.#finished.has(key)) throw new RunIdTakenError()
    this.#live.set(key, {
      key, scopeKey, submitted: run, seq: this.#seq++, record: run.running as RunRecord, resultJson: undefined,
      webhook: run.webhook, taken: true, async: false, events: [], dropped: 0, waiters: new Set()
    })
  }

  listen (listener: RunStoreListener): void { this.#listener = listener }

  async submit (run: NewRun): Promise<RunView> {
    const scopeKey = scopeKeyOf(run.scope)
    const key = `${scopeKey}/${run.runId}`
    if (this.#live.has(key) || this.#finished.has(key)) throw new RunIdTakenError()
    const waiting = this.#waiting.get(scopeKey) ?? 0
    if (waiting >= this.#settings.queueDepth) throw new AsyncQueueFullError()
    const stored: MemoryRun = {
      key, scopeKey, submitted: run, seq: this.#seq++, record: queuedRecord(run), resultJson: undefined,
      webhook: run.webhook, taken: false, async: true, events: [], dropped: 0, waiters: new Set()
    }
    this.#live.set(key, stored)
    this.#waiting.set(scopeKey, waiting + 1)
    const queue = this.#queues.get(scopeKey)
    if (queue === undefined) this.#queues.set(scopeKey, [stored])
    else queue.push(stored)
    this.#handOut()
    return viewOf(stored)
  }

  async get (scope: RunScope, runId: string): Promise<RunView> {
    return viewOf(this.#find(scope, runId))
  }

  async cancel (scope: RunScope, runId: string): Promise<RunView> {
    const run = this.#find(scope, runId)
    if (!isAsync(run)) throw new RunNotAsyncError()
    if (isFinished(run.record)) throw new RunFinishedError()
    const wasRunning = run.record.status === 'running'
    if (!wasRunning && !run.taken) this.#waiting.set(run.scopeKey, (this.#waiting.get(run.scopeKey) ?? 1) - 1)
    const canceled = canceledRecord(run.record, Date.now())
    run.record = canceled.record
    run.resultJson = canceled.resultJson
    this.#retire(run)
    if (wasRunning) this.#listener?.canceled(scope, runId)
    return viewOf(run)
  }

  async take (signal: AbortSignal): Promise<TakenRun> {
    if (signal.aborted) throw signal.reason
    const ready = this.#oldestQueued()
    if (ready !== undefined) return this.#give(ready)
    if (this.#closed) throw new Error('run store closed')
    return await new Promise<TakenRun>((resolve, reject) => {
      const taker: Taker = {
        resolve,
        reject,
        signal,
        abandon: () => {
          this.#takers = this.#takers.filter(other => other !== taker)
          reject(signal.reason)
        }
      }
      this.#takers.push(taker)
      signal.addEventListener('abort', taker.abandon, { once: true })
    })
  }

  async start (taken: TakenRun, startedAt: number): Promise<boolean> {
    const run = this.#live.get(keyOf(taken))
    if (run === undefined || run.record.status !== 'queued') return false
    run.record = startedRecord(run.record, taken.createdAt, startedAt)
    return true
  }

  async release (taken: TakenRun): Promise<void> {
    const run = this.#live.get(keyOf(taken))
    if (run === undefined || !run.taken || run.record.status !== 'queued') return
    run.taken = false
    this.#waiting.set(run.scopeKey, (this.#waiting.get(run.scopeKey) ?? 0) + 1)
    const queue = this.#queues.get(run.scopeKey) as MemoryRun[]
    queue.unshift(run) // it was the oldest when it was taken: it keeps its place
    this.#handOut()
  }

  appendEvent (taken: TakenRun, n: number, data: string): void {
    const run = this.#live.get(keyOf(taken))
    if (run === undefined || run.record.status !== 'running' || n !== run.dropped + run.events.length) return
    run.events.push(data)
    const excess = run.events.length - this.#settings.maxEvents
    // trimmed in batches (a splice per event would be quadratic); readers never see more than maxEvents
    if (excess > 0 && excess >= Math.min(1024, this.#settings.maxEvents)) {
      run.events.splice(0, excess)
      run.dropped += excess
    }
    wake(run)
  }

  async finish (taken: TakenRun, outcome: RunOutcome, keep?: KeyAnswer): Promise<RunView> {
    if (keep !== undefined) await this.keepAnswer(taken.scope, keep.slot, taken.runId, keep.answer)
    const key = keyOf(taken)
    const run = this.#live.get(key) ?? this.#finished.get(key)
    if (run === undefined) throw new RunNotFoundError()
    if (run.record.status === 'running') {
      run.record = finishedRecord(run.record, outcome)
      run.resultJson = outcome.resultJson
      this.#retire(run)
    }
    return viewOf(run)
  }

  async webhookDone (scope: RunScope, runId: string, status: WebhookStatus, attempts: number): Promise<void> {
    const run = this.#find(scope, runId)
    run.record = withWebhook(run.record, { status, attempts })
    if (status !== 'pending') run.webhook = undefined
  }

  async follow (scope: RunScope, runId: string, after: number, signal: AbortSignal): Promise<AsyncIterable<RunEventItem>> {
    const run = this.#find(scope, runId)
    const last = run.dropped + run.events.length - 1
    if (after > last) throw new EventBeyondLastError(after, last)
    return this.#events(run, after + 1, signal)
  }

  // in memory, webhook delivery is as it always was: nothing is written down
  async holdDelivery (_delivery: NewDelivery): Promise<HeldDelivery | undefined> { return undefined }
  async deliveryAttempt (_delivery: HeldDelivery): Promise<void> {}
  async deliveryDone (_delivery: HeldDelivery): Promise<void> {}
  async leaveDelivery (_delivery: HeldDelivery, _stopping: boolean): Promise<void> {}

  async queuedCount (): Promise<number> {
    const scope = this.#settings.scope
    if (scope !== undefined) return this.#waiting.get(scopeKeyOf(scope)) ?? 0
    let count = 0
    for (const waiting of this.#waiting.values()) count += waiting
    return count
  }

  async close (): Promise<void> {
    this.#closed = true
    const takers = this.#takers
    this.#takers = []
    for (const taker of takers) {
      taker.signal.removeEventListener('abort', taker.abandon)
      taker.reject(new Error('run store closed'))
    }
    for (const run of this.#live.values()) wake(run)
  }

  async * #events (run: MemoryRun, from: number, signal: AbortSignal): AsyncGenerator<RunEventItem> {
    let next = from
    while (!signal.aborted && !this.#closed) {
      const first = this.#firstKept(run)
      if (next < first) {
        yield { type: 'gap', first }
        next = first
        continue
      }
      if (next < run.dropped + run.events.length) {
        yield { type: 'event', n: next, data: run.events[next - run.dropped] as string }
        next++
        continue
      }
      if (isFinished(run.record)) {
        yield { type: 'done', view: viewOf(run) }
        return
      }
      await changeOf(run, signal)
    }
  }

  /** The first event a reader may still get: the store trims in batches, readers see at most maxEvents. */
  #firstKept (run: MemoryRun): number {
    return Math.max(run.dropped, run.dropped + run.events.length - this.#settings.maxEvents)
  }

  #find (scope: RunScope, runId: string): MemoryRun {
    const key = `${scopeKeyOf(scope)}/${runId}`
    const run = this.#live.get(key) ?? this.#finished.get(key)
    if (run === undefined) throw new RunNotFoundError()
    return run
  }

  /** A finished run leaves the live map for the retention cache; its followers hear of the end. */
  #retire (run: MemoryRun): void {
    this.#live.delete(run.key)
    run.submitted = undefined // nothing reads a finished run's request: its body would be kept for RUN_RETENTION_SECONDS, uncounted by the byte budget
    const first = this.#firstKept(run)
    run.events = run.events.slice(first - run.dropped)
    run.dropped = first
    this.#finished.set(run.key, run)
    wake(run)
  }

  /** The oldest queued run of the served scopes, taken off its queue. */
  #oldestQueued (): MemoryRun | undefined {
    const served = this.#settings.scope
    let oldest: MemoryRun | undefined
    let from: MemoryRun[] | undefined
    const consider = (queue: MemoryRun[] | undefined): void => {
      if (queue === undefined) return
      while (queue.length > 0 && (queue[0] as MemoryRun).record.status !== 'queued') queue.shift() // canceled while queued
      const head = queue[0]
      if (head !== undefined && (oldest === undefined || head.seq < oldest.seq)) {
        oldest = head
        from = queue
      }
    }
    if (served !== undefined) consider(this.#queues.get(scopeKeyOf(served)))
    else for (const queue of this.#queues.values()) consider(queue)
    from?.shift()
    return oldest
  }

  #give (run: MemoryRun): TakenRun {
    run.taken = true
    this.#waiting.set(run.scopeKey, (this.#waiting.get(run.scopeKey) ?? 1) - 1)
    return { ...run.submitted as NewRun, webhook: run.webhook, entry: '' }
  }

  /** Hands queued runs to waiting takers, oldest first. */
  #handOut (): void {
    while (this.#takers.length > 0) {
      const run = this.#oldestQueued()
      if (run === undefined) return
      const taker = this.#takers.shift() as Taker
      taker.signal.removeEventListener('abort', taker.abandon)
      taker.resolve(this.#give(run))
    }
  }
}

const scopeKeyOf = (scope: RunScope): string => `${scope.projectId}/${scope.appName}`
const keyOf = (run: TakenRun): string => `${scopeKeyOf(run.scope)}/${run.runId}`
const isAsync = (run: MemoryRun): boolean => run.async

function viewOf (run: MemoryRun): RunView {
  return { record: run.record, resultJson: run.resultJson, async: isAsync(run) }
}

function wake (run: MemoryRun): void {
  if (run.waiters.size === 0) return
  const waiters = [...run.waiters]
  run.waiters.clear()
  for (const resolve of waiters) resolve()
}

/** Resolves at the run's next event or end, or when `signal` aborts. */
async function changeOf (run: MemoryRun, signal: AbortSignal): Promise<void> {
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
