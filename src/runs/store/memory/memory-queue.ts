import { AsyncQueueFullError, BodyTooLargeError } from '../../../errors.ts'
import { FairQueue } from '../../../shared/fair-queue.ts'
import { DEFAULT_QUEUE_TTL_SECONDS, expiryError, queuedExpiry } from '../../run-expiry.ts'
import { setLongTimeout } from '../../../shared/longest-timer.ts'
import { expiredRecord, nextAttempt, queuedRecord, startedRecord } from '../../run-record.ts'
import type { RunQueue } from '../run-queue.ts'
import type { NewRun, RunView, TakenRun } from '../../run-data.ts'
import { keyOf, type MemoryRun, type MemoryRuns, scopeKeyOf, viewOf } from './memory-runs.ts'

/** Still waiting in the queue: not canceled or expired (dropped when met), nor taken. */
const waitsInQueue = (run: MemoryRun): boolean => run.record.status === 'queued' && !run.taken

interface Taker {
  resolve: (run: TakenRun) => void
  reject: (error: unknown) => void
  signal: AbortSignal
  abandon: () => void
}

/** The queue of async runs in this process's memory: only this sidecar takes them. */
export class MemoryQueue implements RunQueue {
  readonly shared = false
  readonly #runs: MemoryRuns
  /** Queued (not taken) runs per scope, by urgency then round robin across callers; canceled and expired ones are dropped when met. */
  readonly #queues = new Map<string, FairQueue<MemoryRun>>()
  #takers: Taker[] = []
  #capped: ((caller: string) => boolean) | undefined
  readonly #isCapped = (caller: string): boolean => this.#capped?.(caller) === true

  constructor (runs: MemoryRuns) {
    this.#runs = runs
  }

  async submit (run: NewRun): Promise<RunView> {
    const scopeKey = scopeKeyOf(run.scope)
    this.#runs.refuseTaken(run)
    const { queueDepth, queueMaxBytes } = this.#runs.settings
    const bytes = run.request.body?.length ?? 0
    if (bytes > queueMaxBytes) throw new BodyTooLargeError(queueMaxBytes)
    if ((this.#runs.waiting.get(scopeKey) ?? 0) >= queueDepth) throw new AsyncQueueFullError()
    if ((this.#runs.waitingBytes.get(scopeKey) ?? 0) + bytes > queueMaxBytes) throw new AsyncQueueFullError('ASYNC_QUEUE_MAX_BYTES')
    const stored = this.#runs.add(run, queuedRecord(run), true)
    this.#runs.countWaiting(stored, 1)
    this.#runs.countQueued(stored, bytes)
    this.#queueOf(scopeKey).push(stored.urgency, stored.caller, stored)
    this.#armExpiry(stored)
    this.#handOut()
    return viewOf(stored)
  }

  async take (signal: AbortSignal): Promise<TakenRun> {
    if (signal.aborted) throw signal.reason
    const ready = this.#nextQueued()
    if (ready !== undefined) return this.#give(ready)
    if (this.#runs.closed) throw new Error('run store closed')
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

  /**
   * A run its take started, as it goes to the app: still running here (not canceled or expired
   * since), its `started_at` now `startedAt` (in memory it costs nothing to say the moment it left
   * for the app); or undefined.
   */
  async start (taken: TakenRun, startedAt: number): Promise<TakenRun | undefined> {
    const run = this.#runs.live.get(keyOf(taken))
    if (run === undefined || !run.taken || run.record.status !== 'running') return undefined
    run.record = startedRecord(run.record, taken.createdAt, startedAt)
    return taken
  }

  /** A run taken (started) that cannot run here after all: queued again, in its place, as it was before the take. */
  async release (taken: TakenRun): Promise<void> {
    const run = this.#runs.live.get(keyOf(taken))
    const submitted = run?.submitted
    if (run === undefined || submitted === undefined || !run.taken || run.record.status !== 'running') return
    run.taken = false
    run.record = queuedRecord({ ...submitted, webhook: run.webhook })
    this.#runs.countWaiting(run, 1)
    this.#runs.countQueued(run, submitted.request.body?.length ?? 0)
    this.#armExpiry(run)
    // it was the next when it was taken: it keeps its place
    this.#queueOf(run.scopeKey).putFirst(run.urgency, run.caller, run)
    this.#handOut()
  }

  nextUrgency (): number | undefined {
    return this.#next(false)?.urgency
  }

  capCallers (capped: (caller: string) => boolean): void {
    this.#capped = capped
  }

  callerFreed (caller: string): void {
    for (const queue of this.#queues.values()) queue.unpark(caller)
    this.#handOut()
  }

  async queuedByUrgency (): Promise<readonly number[]> {
    return this.#runs.waitingByUrgency
  }

  async queuedCount (): Promise<number> {
    const scope = this.#runs.settings.scope
    if (scope !== undefined) return this.#runs.waiting.get(scopeKeyOf(scope)) ?? 0
    let count = 0
    for (const waiting of this.#runs.waiting.values()) count += waiting
    return count
  }

  async runningCount (): Promise<number> {
    const scope = this.#runs.settings.scope
    const served = scope === undefined ? undefined : scopeKeyOf(scope)
    let count = 0
    for (const run of this.#runs.live.values()) if (run.async && run.record.status === 'running' && (served === undefined || run.scopeKey === served)) count++
    return count
  }

  /** Pending take() calls reject. */
  close (): void {
    const takers = this.#takers
    this.#takers = []
    for (const taker of takers) {
      taker.signal.removeEventListener('abort', taker.abandon)
      taker.reject(new Error('run store closed'))
    }
  }

  /** A queued run fails at its time limit (not when a slot frees). */
  #armExpiry (run: MemoryRun): void {
    const { at } = queuedExpiry(run.submitted as NewRun, this.#ttlSeconds)
    run.expiry = setLongTimeout(() => { this.#expire(run) }, at - Date.now(), true)
  }

  /** queued → failed (504): it never reaches the app (a taker holding it finds it no longer queued); its webhook is the listener's to send. */
  #expire (run: MemoryRun): void {
    const submitted = run.submitted
    if (run.record.status !== 'queued' || submitted === undefined) return
    const now = Date.now()
    const limit = queuedExpiry(submitted, this.#ttlSeconds)
    if (limit.at > now) {
      this.#armExpiry(run) // the clocks of timers and of Date differ by a millisecond at times: not yet
      return
    }
    this.#runs.countWaiting(run, -1)
    const expired = expiredRecord(run.record, now, expiryError(limit))
    run.record = expired.record
    run.resultJson = expired.resultJson
    const taken: TakenRun = { ...submitted, webhook: run.webhook, entry: '' }
    this.#runs.retire(run)
    this.#runs.listener?.expired(taken, viewOf(run))
  }

  get #ttlSeconds (): number { return this.#runs.settings.queueTtlSeconds ?? DEFAULT_QUEUE_TTL_SECONDS }

  #queueOf (scopeKey: string): FairQueue<MemoryRun> {
    let queue = this.#queues.get(scopeKey)
    if (queue === undefined) {
      queue = new FairQueue(waitsInQueue, this.#isCapped)
      this.#queues.set(scopeKey, queue)
    }
    return queue
  }

  /** The next queued run of the served scopes, taken off its queue. */
  #nextQueued (): MemoryRun | undefined {
    return this.#next(true)
  }

  /** The next queued run of the served scopes (the most urgent head; the oldest of equals), taken off its queue when `take`. */
  #next (take: boolean): MemoryRun | undefined {
    const served = this.#runs.settings.scope
    if (served !== undefined) {
      const queue = this.#queues.get(scopeKeyOf(served))
      return take ? queue?.shift() : queue?.peek()
    }
    let next: MemoryRun | undefined
    let from: FairQueue<MemoryRun> | undefined
    for (const queue of this.#queues.values()) {
      const head = queue.peek()
      if (head !== undefined && (next === undefined || head.urgency < next.urgency || (head.urgency === next.urgency && head.seq < next.seq))) {
        next = head
        from = queue
      }
    }
    if (take) from?.shift()
    return next
  }

  /**
   * A run taken is started in the same step (as the Redis store's TAKE does): it runs in the free
   * slot its taker holds. Attempts counted (RUN_MAX_ATTEMPTS above 1), it is its first: in memory a
   * run is never queued again for another.
   */
  #give (run: MemoryRun): TakenRun {
    const attempt = (this.#runs.settings.maxAttempts ?? 1) > 1 ? nextAttempt(run.record) : undefined
    const taken: TakenRun = { ...run.submitted as NewRun, urgency: run.urgency, caller: run.caller, webhook: run.webhook, entry: '', ...attempt === undefined ? {} : { attempt } }
    run.taken = true
    run.record = startedRecord(run.record, taken.createdAt, Date.now(), attempt)
    run.expiry?.clear()
    this.#runs.uncountQueued(run)
    this.#runs.countWaiting(run, -1)
    return taken
  }

  /** Hands queued runs to waiting takers, in queue order. */
  #handOut (): void {
    while (this.#takers.length > 0) {
      const run = this.#nextQueued()
      if (run === undefined) return
      const taker = this.#takers.shift() as Taker
      taker.signal.removeEventListener('abort', taker.abandon)
      taker.resolve(this.#give(run))
    }
  }
}
