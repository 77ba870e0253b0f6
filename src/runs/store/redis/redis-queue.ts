import { setTimeout as delay } from 'node:timers/promises'
import { AsyncQueueFullError, BodyTooLargeError, RunIdTakenError, RunStoreUnavailableError } from '../../../errors.ts'
import { queuedRecord, startedRecord } from '../../run-record.ts'
import type { RunQueue } from '../run-queue.ts'
import { type NewRun, type RunOutcome, type RunRecord, type RunView, type TakenRun, UNREAD_REQUEST } from '../../run-data.ts'
import type { RedisRecords } from './redis-records.ts'
import { attemptIn, attemptTakenOver, countsAttempts } from './redis-attempts.ts'
import { guard, type RedisContext, ScopeKeys, scopeOfQueue } from './redis-context.ts'
import { requestJson, wholeRun } from './redis-run-request.ts'
import { GROUP, RELEASE, RUNNING, START_READ, SUBMIT, type TakeReply, TURNS_BY_URGENCY } from './redis-queue-scripts.ts'
import { CAPPED, STALE, TurnTaker } from './redis-take.ts'
import { DEFAULT_QUEUE_TTL_SECONDS, queuedExpiry } from '../../run-expiry.ts'
import { DEFAULT_URGENCY } from '../../../shared/fair-queue.ts'

/** A queue entry: the queue's key, the entry's id and the run it names (what the reaper hands back). */
interface QueueEntry { queue: string, id: string, runId: string }

/**
 * How long one blocking wait for a wake-up lasts before the queue is asked again: an idle
 * sidecar's cost (two commands a wait), and the longest a run waits should its wake-up be lost (a
 * taker that died holding it: it is popped and taken in one write, so hardly ever). A stop does not
 * wait for it (the wait is abandoned, its connection closed).
 */
const BLOCK_SECONDS = 300

/**
 * The queue of async runs in Redis: a stream per app with a consumer group, and the runs' turn
 * order (redis-queue-scripts.ts: by urgency, fair across callers). TAKE hands a sidecar the next
 * run's entry, in its pending list until the run ends (the reaper gives a lost sidecar's to
 * another). A sidecar with nothing to take waits on the app's wake list (one wake-up per run queued).
 */
export class RedisQueue implements RunQueue {
  readonly shared = true
  readonly #ctx: RedisContext
  /** Runs taken over from a lost sidecar before they started: handed out by take() first. */
  readonly #reclaimed: TakenRun[] = []
  /** The blocking wait for a wake-up under way, shared by the takes waiting. */
  #read: Promise<void> | undefined
  readonly #taker: TurnTaker
  /** Runs the shared wait's take brought, for the takes waiting. */
  readonly #arrived: TakenRun[] = []
  /** Takes waiting: woken when the wait ends or a run is taken over. */
  readonly #wakers = new Set<() => void>()
  /** Takes waiting because every run queued was a capped caller's: woken also by a run queued here, or a caller freed. */
  readonly #cappedWakers = new Set<() => void>()
  #waiting = 0
  /** Runs TAKE started that have not gone to the app yet, by entry: their record as queued, should they be given back. */
  readonly #asQueued = new Map<string, string>()

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
    this.#taker = new TurnTaker(ctx)
  }

  async submit (run: NewRun): Promise<RunView> {
    const keys = new ScopeKeys(run.scope)
    const record = queuedRecord(run)
    const { queueDepth, queueMaxBytes } = this.#ctx.settings
    if ((run.request.body?.length ?? 0) > queueMaxBytes) throw new BodyTooLargeError(queueMaxBytes)
    // a Cancel-After sooner than the queue's TTL puts the run in the due set; the TTL alone is found from the queued index (redis-due.ts)
    const limit = queuedExpiry(run, this.#ctx.settings.queueTtlSeconds ?? DEFAULT_QUEUE_TTL_SECONDS)
    const expiry = limit.cancelAfter ? limit.at : undefined
    const outcome = await guard(SUBMIT.call(this.#ctx.redis, {
      run: keys.run(run.runId), queue: keys.queue, queuedBytes: keys.queuedBytes, dueSet: keys.expiry, index: keys.runs, turns: keys.turns, fair: keys.fair, wake: keys.wake,
      record: JSON.stringify(record), request: requestJson(run), body: run.request.body ?? '',
      webhook: run.webhook === undefined ? '' : JSON.stringify(run.webhook), depth: queueDepth, runId: run.runId, maxBytes: queueMaxBytes,
      expiry: expiry ?? '', createdAtMs: run.createdAt, urgency: run.urgency ?? '', caller: run.caller ?? '', sub: run.sub ?? ''
    }))
    if (outcome === 'run id taken') throw new RunIdTakenError()
    if (outcome === 'queue full') throw new AsyncQueueFullError()
    if (outcome === 'bytes full') throw new AsyncQueueFullError('ASYNC_QUEUE_MAX_BYTES')
    this.#taker.queued(run.urgency ?? DEFAULT_URGENCY)
    this.#ctx.dueAt?.(limit.at)
    this.#wakeCapped() // a take waiting while only capped callers' runs were queued (one waiting for a wake-up gets this run's)
    return { record, resultJson: undefined, async: true }
  }

  nextUrgency (): number | undefined {
    return this.#taker.nextUrgency
  }

  /** Where a run's end is written (END_AND_TAKE goes through it): set once by the store. */
  records: RedisRecords | undefined

  /**
   * A run's end and, in the same step, the next run for the slot it leaves (started, held here),
   * when the last take saw a backlog and the end is one step (RedisRecords.finish); else the end
   * alone, and no run.
   */
  async endAndTake (run: TakenRun, outcome: RunOutcome): Promise<{ view: RunView, next: TakenRun | undefined }> {
    const records = this.records as RedisRecords
    // no backlog seen by the last take: the end alone (a run queued since is taken by whoever a wake-up reaches)
    if (!this.#taker.backlog) return { view: await records.finish(run, outcome), next: undefined }
    let next: TakenRun | undefined
    const { fields, look } = this.#taker.request()
    const view = await records.finish(run, outcome, undefined, undefined, {
      fields,
      cut: () => { this.#taker.cut() },
      taken: take => {
        const taken = this.#taker.took(take, look)
        if (taken !== undefined && taken !== STALE && taken !== CAPPED) next = this.#taken(taken)
      }
    })
    return { view, next }
  }

  capCallers (_capped: (caller: string) => boolean, all: () => readonly string[]): void {
    this.#taker.capped = all
  }

  /** A capped caller's call ended here: a take that found only capped callers' runs asks again. */
  callerFreed (): void {
    this.#wakeCapped()
  }

  /**
   * The store's connection is ready again (a restart, a failover): the takes waiting ask at once,
   * on the request connection, instead of only through the blocking wait (whose connection may come
   * back later, and whose wake-ups a restarted Redis may have lost).
   */
  reconnected (): void {
    this.#taker.drained = false
    this.#wake()
  }

  /**
   * The next run to run here: one taken over from a lost sidecar first, else the next in the turn
   * order. With none queued, the takes waiting share one blocking wait for a wake-up (on its own
   * connection, where they would wait one after another anyway), each asks again once it ends; a
   * run taken over meanwhile wakes them without waiting for it.
   */
  async take (signal: AbortSignal): Promise<TakenRun> {
    this.#waiting++
    try {
      while (!signal.aborted && !this.#ctx.closed) {
        const reclaimed = this.#reclaimed.shift()
        if (reclaimed !== undefined) return reclaimed
        const arrived = this.#arrived.shift()
        if (arrived !== undefined) return arrived
        const taken = this.#taker.drained ? undefined : await this.#takeNext().catch((error: unknown): typeof UNREACHABLE => {
          if (error instanceof RunStoreUnavailableError) return UNREACHABLE
          throw error
        })
        if (taken === STALE) continue
        if (taken === CAPPED) {
          // the runs left are for other replicas, or for when a capped caller's call ends here
          const woken = new Promise<void>(resolve => { this.#wakers.add(resolve); this.#cappedWakers.add(resolve) })
          if (await abortable(Promise.race([woken, delay(CAPPED_RETRY_MS)]), signal) === ABORTED) break
          continue
        }
        if (taken === UNREACHABLE) {
          // as a blocking read would: the take waits through the outage, asking again now and then
          if (await abortable(delay(RETRY_MS), signal) === ABORTED) break
          continue
        }
        if (taken !== undefined) {
          const run = this.#taken(taken)
          // the take was abandoned meanwhile (a stop): not lost, queued again
          if (signal.aborted || this.#ctx.closed) await this.release(run).catch(() => {})
          else return run
          break
        }
        // the shared wait's take, or a takeover, brought a run while this take asked for none
        if (this.#arrived.length > 0 || this.#reclaimed.length > 0) continue
        if (this.#read === undefined) {
          this.#read = this.#awaitWakeUp()
          this.#read.catch(() => {}) // each take waiting on it sees the failure; none waiting, nothing to tell
        }
        const woken = new Promise<void>(resolve => { this.#wakers.add(resolve) })
        const outcome = await abortable(Promise.race([this.#read, woken]), signal).catch(() => UNREACHABLE)
        if (outcome === ABORTED) break
        if (outcome === UNREACHABLE && await abortable(delay(RETRY_MS), signal) === ABORTED) break
      }
    } finally {
      this.#waiting--
      // the last take gone (a stop): what the wait's take brought goes back to the queue
      if (this.#waiting === 0) for (const run of this.#arrived.splice(0)) void this.release(run).catch(() => {})
    }
    throw signal.reason ?? new Error('run store closed')
  }

  /** The next run in the turn order, held here; undefined none queued; STALE turns passed over, ask again. */
  async #takeNext (): Promise<TakeReply | typeof STALE | typeof CAPPED | undefined> {
    await this.#ensureGroup()
    return await this.#taker.take(this.#ctx.redis)
  }

  /** The app's consumer group exists (the reaper and the takeover read it), made once per connection. */
  async #ensureGroup (): Promise<void> {
    const { redis, groups, own } = this.#ctx
    if (groups.has(own.queue)) return
    await guard(redis.xgroup('CREATE', own.queue, GROUP, '0', 'MKSTREAM')).catch((error: Error) => {
      if (!error.message.startsWith('BUSYGROUP')) throw error
    })
    groups.add(own.queue)
  }

  /**
   * One blocking wait for a wake-up (a run queued, or given back), at most BLOCK_SECONDS, and a
   * take sent right behind it on the same connection (Redis runs it as the wait ends): a run it
   * takes is left for a waiting take (none waiting any more: given back to the queue).
   */
  async #awaitWakeUp (): Promise<void> {
    let failed = true
    this.#taker.drained = false
    try {
      const woken = this.#ctx.blocking.blpop(this.#ctx.own.wake, BLOCK_SECONDS)
      const taking = this.#taker.take(this.#ctx.blocking)
      taking.catch(() => {}) // its failure is the wait's, or told below
      const wakeUp = await woken
      // the wake-up names the urgency of the run it announces
      if (wakeUp !== null) this.#taker.queued(Number(wakeUp[1]))
      const taken = await taking
      failed = false
      if (taken === undefined || taken === STALE || taken === CAPPED) return
      const run = this.#taken(taken)
      if (this.#waiting > 0 && !this.#ctx.closed) this.#arrived.push(run)
      else await this.release(run).catch(() => {})
    } finally {
      this.#read = undefined
      // a failed wait is not a wake-up: the takes waiting get its error (and wait RETRY_MS before
      // asking again); woken instead, they would ask again at once, in a loop as fast as the failure
      // (a connection ioredis gave up rejects at once: a loop that never yields to I/O)
      if (!failed) this.#wake()
    }
  }

  #wake (): void {
    const wakers = [...this.#wakers]
    this.#wakers.clear()
    this.#cappedWakers.clear()
    for (const wake of wakers) wake()
  }

  #wakeCapped (): void {
    const wakers = [...this.#cappedWakers]
    this.#cappedWakers.clear()
    for (const wake of wakers) {
      this.#wakers.delete(wake)
      wake()
    }
  }

  async start (run: TakenRun, startedAt: number): Promise<TakenRun | undefined> {
    // started by its take already: no step left
    if (run.unread !== true) {
      this.#asQueued.delete(run.entry)
      return run
    }
    const keys = new ScopeKeys(run.scope)
    const ctx = this.#ctx
    let old = ctx.known.get(run.entry)
    ctx.known.delete(run.entry)
    // the record as taken (unless a cancel changed it since, the start is one step), else as read now
    for (let read = old === undefined; ; read = true) {
      if (read) {
        const [view, raw, , owner] = await ctx.readOrMissing(keys, run.runId)
        // this start written already: its answer was lost (a timeout, a dropped connection) and the start tried again
        if (view?.record.status === 'running' && owner === ctx.consumer) return await this.#withRequest(keys, { ...run, attempt: view.record.attempt })
        if (view?.record.status === 'running') {
          // another sidecar took the run over while this one was silent (a pause) and runs it: its entry is the other's now
          ctx.lease.held.delete(run.entry)
          return undefined
        }
        if (view === undefined || view.record.status !== 'queued') {
          await ctx.forget(keys, run.entry)
          return undefined
        }
        old = raw
      }
      const queued = JSON.parse(old as string) as RunRecord
      const attempt = countsAttempts(ctx) ? await attemptTakenOver(ctx, keys, run.runId, queued) : undefined
      const json = JSON.stringify(startedRecord(queued, run.createdAt, startedAt, attempt?.attempt, attempt?.ranMs))
      // its request and webhook read in the same step
      const started = await guard(START_READ.call(ctx.redis, {
        run: keys.run(run.runId), queuedBytes: keys.queuedBytes, dueSet: keys.expiry, index: keys.runs,
        oldRecord: old as string, newRecord: json, owner: ctx.consumer, runId: run.runId
      }))
      if (started === undefined) continue
      ctx.known.set(run.entry, json)
      const whole = wholeRun(attempt === undefined ? run : { ...run, attempt: attempt.attempt, firstEvent: attempt.firstEvent }, started.request, started.body, started.webhook)
      if (whole === undefined) throw new Error(`async run ${run.runId} started without its request`)
      return whole
    }
  }

  /** A run this store started already: its request and webhook (kept until it ends), and the number of its first event. */
  async #withRequest (keys: ScopeKeys, run: TakenRun): Promise<TakenRun | undefined> {
    const [request, body, webhook, events] = await guard(this.#ctx.redis.hmgetBuffer(keys.run(run.runId), 'request', 'body', 'webhook', 'events'))
    const first = run.attempt === undefined ? run : { ...run, firstEvent: Number(events?.toString() ?? 0) }
    return wholeRun(first, request ?? null, body ?? null, webhook ?? null)
  }

  async release (run: TakenRun): Promise<void> {
    const keys = new ScopeKeys(run.scope)
    const queued = this.#asQueued.get(run.entry)
    this.#asQueued.delete(run.entry)
    const started = queued === undefined ? '' : this.#ctx.known.get(run.entry) ?? ''
    try {
      await guard(RELEASE.call(this.#ctx.redis, {
        run: keys.run(run.runId), queue: keys.queue, turns: keys.turns, fair: keys.fair, wake: keys.wake, queuedBytes: keys.queuedBytes, dueSet: keys.expiry, index: keys.runs,
        entry: run.entry, runId: run.runId, recordAsStarted: started, recordAsQueued: queued ?? ''
      }))
    } finally {
      // not given back (the store is down): no longer kept claimed either, so once the store is
      // back a reaper (this one or another replica's) takes it over as a lost sidecar's: a run its
      // take started fails "replica lost" (it never reached the app), one taken over unread runs
      this.#ctx.lease.held.delete(run.entry)
    }
  }

  async queuedCount (): Promise<number> {
    return await guard(this.#ctx.redis.zcard(this.#ctx.own.turns))
  }

  /** Runs taken and not ended: the queue's entries (one per run queued or taken, until it ends) less its turns (the runs queued). */
  async runningCount (): Promise<number> {
    return Math.max(0, await guard(RUNNING.call(this.#ctx.redis, { queue: this.#ctx.own.queue, turns: this.#ctx.own.turns })))
  }

  async queuedByUrgency (): Promise<readonly number[]> {
    return await guard(TURNS_BY_URGENCY.call(this.#ctx.redis, { turns: this.#ctx.own.turns }))
  }

  /** A lost sidecar's entry whose run had not started (the reaper claimed it): held here, handed out by take() first. */
  async reclaim (entry: QueueEntry): Promise<void> {
    const keys = new ScopeKeys(scopeOfQueue(entry.queue))
    const [record, urgency, caller] = await guard(this.#ctx.redis.hmget(keys.run(entry.runId), 'record', 'urgency', 'caller'))
    if (record === null || record === undefined || (JSON.parse(record) as RunRecord).status !== 'queued') {
      await this.#ctx.forget(keys, entry.id)
      return
    }
    this.#reclaimed.push(this.#taken({ runId: entry.runId, entry: entry.id, queued: record, urgency: urgency ?? '', caller: caller ?? '' }))
    this.#wake()
  }

  /**
   * A run TAKE handed this store, started (its request with it), held here; or one the reaper took
   * over, taken `unread` (its request comes with the start).
   */
  #taken ({ runId, entry, queued: record, urgency, caller, started }: TakeReply): TakenRun {
    const ctx = this.#ctx
    ctx.lease.held.set(entry, ctx.own.queue)
    const queued = JSON.parse(record) as RunRecord
    const priority = urgency === '' ? {} : { urgency: Number(urgency), caller }
    const run: TakenRun = { scope: ctx.settings.scope, runId, entry, createdAt: Date.parse(queued.created_at), webhook: undefined, request: UNREAD_REQUEST, unread: true, ...priority }
    if (started === undefined) {
      ctx.known.set(entry, record)
      return run
    }
    ctx.known.set(entry, started.record)
    this.#asQueued.set(entry, record)
    // counting attempts, TAKE counted this one in the record, and told where its events start
    const counted = started.firstEvent === undefined ? run : { ...run, attempt: attemptIn(started.record), firstEvent: started.firstEvent }
    const whole = wholeRun(counted, started.request, started.body, started.webhook)
    if (whole === undefined) throw new Error(`async run ${runId} started without its request`)
    return whole
  }
}

/** How long a take that found only capped callers' runs waits (unless a caller frees or a run is queued here) before it asks again. */
const CAPPED_RETRY_MS = 250

/** Redis did not answer the take: asked again after RETRY_MS. */
const UNREACHABLE: unique symbol = Symbol('unreachable')
const RETRY_MS = 500

const ABORTED = Symbol('aborted')

async function abortable<T> (pending: Promise<T>, signal: AbortSignal): Promise<T | typeof ABORTED> {
  if (signal.aborted) return ABORTED
  return await new Promise((resolve, reject) => {
    const abort = (): void => { resolve(ABORTED) }
    signal.addEventListener('abort', abort, { once: true })
    pending.then(value => {
      signal.removeEventListener('abort', abort)
      resolve(value)
    }, (error: unknown) => {
      signal.removeEventListener('abort', abort)
      reject(error)
    })
  })
}
