import { AsyncQueueFullError, BodyTooLargeError, RunIdTakenError } from '../../../errors.ts'
import { queuedRecord, startedRecord } from '../../run-record.ts'
import type { RunQueue } from '../run-queue.ts'
import { type NewRun, type RunRecord, type RunView, type TakenRun, UNREAD_REQUEST } from '../run-store.ts'
import { guard, type RedisContext, ScopeKeys, scopeOfQueue, parseWebhook } from './redis-context.ts'
import { GROUP, RELEASE, START_READ, SUBMIT, WAITING } from './redis-scripts.ts'
import { DEFAULT_QUEUE_TTL_SECONDS, queuedExpiry } from '../../run-expiry.ts'

/** The stored request, without its body (kept as raw bytes beside it). */
interface RequestJson { method: string, path: string, headers: string[], hasBody: boolean }

/**
 * A queue entry as read: the queue's key, the entry's id, the run it names and (written by SUBMIT
 * or RELEASE of this version) its record as queued, and its urgency and caller (when submitted with them).
 */
interface QueueEntry { queue: string, id: string, runId: string, record?: string | undefined, urgency?: number, caller?: string }

/** A run taken (`unread`), with its request, body and webhook as stored; undefined when its request is gone. */
function wholeRun (run: TakenRun, request: Buffer | null, body: Buffer | null, webhook: Buffer | null): TakenRun | undefined {
  if (request === null) return undefined
  const req = JSON.parse(request.toString()) as RequestJson
  const { unread: _, ...taken } = run
  return {
    ...taken,
    webhook: webhook === null ? undefined : parseWebhook(webhook.toString()),
    request: { method: req.method, path: req.path, headers: req.headers, body: req.hasBody ? body ?? Buffer.alloc(0) : null }
  }
}

/**
 * How long one blocking read of the queue waits before asking again: an idle sidecar's cost. A
 * stop does not wait for it (the read is abandoned, its connection closed).
 */
const BLOCK_MS = 10_000

/**
 * The queue of async runs in Redis: a stream per app with a consumer group. A run handed to a
 * sidecar stays in its pending list until it ends (the reaper gives a lost sidecar's to another).
 */
export class RedisQueue implements RunQueue {
  readonly shared = true
  readonly #ctx: RedisContext
  /** Runs taken over from a lost sidecar before they started: handed out by take() first. */
  readonly #reclaimed: TakenRun[] = []
  /** Entries the shared read brought, for the takes waiting. */
  readonly #arrived: QueueEntry[] = []
  /** The blocking read under way, shared by the takes waiting. */
  #read: Promise<void> | undefined
  /** Takes waiting: woken when the read ends or a run is taken over. */
  readonly #wakers = new Set<() => void>()
  #waiting = 0

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
  }

  async submit (run: NewRun): Promise<RunView> {
    const keys = new ScopeKeys(run.scope)
    const record = queuedRecord(run)
    const request: RequestJson = { method: run.request.method, path: run.request.path, headers: [...run.request.headers], hasBody: run.request.body !== null }
    const { queueDepth, queueMaxBytes } = this.#ctx.settings
    if ((run.request.body?.length ?? 0) > queueMaxBytes) throw new BodyTooLargeError(queueMaxBytes)
    const expiry = queuedExpiry(run, this.#ctx.settings.queueTtlSeconds ?? DEFAULT_QUEUE_TTL_SECONDS).at
    const outcome = await guard(SUBMIT.run(this.#ctx.redis, [keys.run(run.runId), keys.queue, keys.queuedBytes, keys.running, keys.expiry, keys.runs], [
      JSON.stringify(record), JSON.stringify(request), run.request.body ?? '',
      run.webhook === undefined ? '' : JSON.stringify(run.webhook), queueDepth, run.runId, queueMaxBytes, expiry, run.createdAt,
      run.urgency ?? '', run.caller ?? ''
    ]))
    if (outcome === -1) throw new RunIdTakenError()
    if (outcome === -2) throw new AsyncQueueFullError()
    if (outcome === -3) throw new AsyncQueueFullError('ASYNC_QUEUE_MAX_BYTES')
    return { record, resultJson: undefined, async: true }
  }

  /**
   * The next run to run here: one taken over from a lost sidecar first, else the oldest queued.
   * The takes waiting share one blocking read of the queue (on its own connection, where they
   * would run one after another anyway): an entry it brings goes to one of them, and a run taken
   * over meanwhile wakes them without waiting for the read's end.
   */
  async take (signal: AbortSignal): Promise<TakenRun> {
    this.#waiting++
    try {
      while (!signal.aborted && !this.#ctx.closed) {
        const reclaimed = this.#reclaimed.shift()
        if (reclaimed !== undefined) return reclaimed
        const entry = this.#arrived.shift()
        if (entry !== undefined) {
          const run = await this.#taken(entry)
          if (run !== undefined) return run
          continue
        }
        if (this.#read === undefined) {
          this.#read = this.#readOnce()
          this.#read.catch(() => {}) // each take waiting on it sees the failure; none waiting, nothing to tell
        }
        const woken = new Promise<void>(resolve => { this.#wakers.add(resolve) })
        const outcome = await abortable(Promise.race([this.#read, woken]), signal)
        if (outcome === ABORTED) break
      }
    } finally {
      this.#waiting--
      // the last take gone (a stop): what the read brought for it goes back to the queue
      if (this.#waiting === 0) for (const entry of this.#arrived.splice(0)) void this.#giveBack(entry)
    }
    throw signal.reason ?? new Error('run store closed')
  }

  /** One blocking read; what it brings is left for a waiting take (or, none waiting any more, given back to the queue). */
  async #readOnce (): Promise<void> {
    let failed = true
    try {
      const entry = await this.#readQueue(this.#ctx.own.queue)
      failed = false
      if (entry === undefined) return
      if (this.#waiting > 0 && !this.#ctx.closed) this.#arrived.push(entry)
      else await this.#giveBack(entry) // the takes left (a stop) while it was blocked: not lost, queued again
    } finally {
      this.#read = undefined
      // a failed read is not a wake-up: the takes waiting get its error (and wait before trying
      // again); woken instead, they would read again at once, in a loop as fast as the failure
      // (a connection ioredis gave up rejects at once: a loop that never yields to I/O)
      if (!failed) this.#wake()
    }
  }

  #wake (): void {
    const wakers = [...this.#wakers]
    this.#wakers.clear()
    for (const wake of wakers) wake()
  }

  async start (run: TakenRun, startedAt: number): Promise<TakenRun | undefined> {
    const keys = new ScopeKeys(run.scope)
    const ctx = this.#ctx
    let old = ctx.known.get(run.entry)
    ctx.known.delete(run.entry)
    // the record as taken (unless a cancel changed it since, the start is one step), else as read now
    for (let read = old === undefined; ; read = true) {
      if (read) {
        const [view, raw, , owner] = await ctx.readOrMissing(keys, run.runId)
        // this start written already: its answer was lost (a timeout, a dropped connection) and the start tried again
        if (view?.record.status === 'running' && owner === ctx.consumer) return await this.#withRequest(keys, run)
        if (view?.record.status === 'running') {
          // another sidecar took the run over while this one was silent (a pause) and runs it: its entry is the other's now
          ctx.held.delete(run.entry)
          return undefined
        }
        if (view === undefined || view.record.status !== 'queued') {
          await ctx.forget(keys, run.entry)
          return undefined
        }
        old = raw
      }
      const json = JSON.stringify(startedRecord(JSON.parse(old as string) as RunRecord, run.createdAt, startedAt))
      // its request and webhook read in the same step
      const reply = await guard(START_READ.runBuffer(ctx.redis, [keys.run(run.runId), keys.queuedBytes, keys.running, keys.expiry], [old as string, json, ctx.consumer, run.runId])) as [number, Buffer | null, Buffer | null, Buffer | null]
      if (reply[0] !== 1) continue
      ctx.known.set(run.entry, json)
      const whole = wholeRun(run, reply[1], reply[2], reply[3])
      if (whole === undefined) throw new Error(`async run ${run.runId} started without its request`)
      return whole
    }
  }

  /** A run this store started already: its request and webhook (kept until it ends). */
  async #withRequest (keys: ScopeKeys, run: TakenRun): Promise<TakenRun | undefined> {
    const [request, body, webhook] = await guard(this.#ctx.redis.hmgetBuffer(keys.run(run.runId), 'request', 'body', 'webhook')) as Array<Buffer | null>
    return wholeRun(run, request ?? null, body ?? null, webhook ?? null)
  }

  async release (run: TakenRun): Promise<void> {
    const keys = new ScopeKeys(run.scope)
    try {
      await guard(RELEASE.run(this.#ctx.redis, [keys.run(run.runId), keys.queue], [run.entry, run.runId]))
    } finally {
      // not given back (the store is down): no longer kept claimed either, so once the store is
      // back a reaper (this one or another replica's) takes it over as a lost sidecar's queued run
      this.#ctx.held.delete(run.entry)
    }
  }

  async queuedCount (): Promise<number> {
    return Number(await guard(WAITING.run(this.#ctx.redis, [this.#ctx.own.queue, this.#ctx.own.running], [])))
  }

  async runningCount (): Promise<number> {
    return await guard(this.#ctx.redis.scard(this.#ctx.own.running))
  }

  /** A lost sidecar's entry whose run had not started (the reaper claimed it): held here, handed out by take() first. */
  async reclaim (entry: QueueEntry): Promise<void> {
    const run = await this.#taken(entry)
    if (run === undefined) return
    this.#reclaimed.push(run)
    this.#wake()
  }

  /** One entry from the oldest end of the app's queue, or undefined after BLOCK_MS. */
  async #readQueue (queue: string): Promise<QueueEntry | undefined> {
    const { blocking, groups } = this.#ctx
    if (!groups.has(queue)) {
      await blocking.xgroup('CREATE', queue, GROUP, '0', 'MKSTREAM').catch((error: Error) => {
        if (!error.message.startsWith('BUSYGROUP')) throw error
      })
      groups.add(queue)
    }
    let reply: unknown
    try {
      reply = await blocking.call('XREADGROUP', 'GROUP', GROUP, this.#ctx.consumer, 'COUNT', 1, 'BLOCK', BLOCK_MS, 'STREAMS', queue, '>')
    } catch (error) {
      if (String((error as Error).message).startsWith('NOGROUP')) groups.clear()
      throw error
    }
    if (reply === null) return undefined
    // [[key, entries], …] (RESP2) or [key, entries, …] (ioredis 6 reads the RESP3 map flat)
    const list = reply as unknown[]
    const [, entries] = (typeof list[0] === 'string' ? list : list[0]) as [string, Array<[string, string[]]>]
    const [id, fields] = entries[0] as [string, string[]]
    // ['run', <id>, 'record', <record as queued>, 'urgency', <u>, 'caller', <c>] (an older sidecar's entry: less)
    const entry: QueueEntry = { queue, id, runId: fields[1] as string, record: fields[2] === 'record' ? fields[3] : undefined }
    const urgency = Number(fields[5])
    if (fields[4] !== 'urgency' || !Number.isInteger(urgency) || urgency < 0 || urgency > 7) return entry
    return { ...entry, urgency, caller: fields[7] ?? '' }
  }

  /**
   * The run an entry names, held by this store, taken `unread` (its request comes with the start);
   * undefined (the entry dropped) when it is no longer queued.
   */
  async #taken (entry: QueueEntry): Promise<TakenRun | undefined> {
    const scope = scopeOfQueue(entry.queue)
    const keys = new ScopeKeys(scope)
    // the record as queued: carried by the entry, or read (an entry of the version before, a run taken over)
    const record = entry.record ?? await guard(this.#ctx.redis.hget(keys.run(entry.runId), 'record'))
    const queued = record === null ? undefined : JSON.parse(record) as RunRecord
    if (queued === undefined || queued.status !== 'queued') {
      await this.#ctx.forget(keys, entry.id)
      return undefined
    }
    this.#ctx.held.set(entry.id, entry.queue)
    this.#ctx.known.set(entry.id, record as string)
    const priority = entry.urgency === undefined ? {} : { urgency: entry.urgency, caller: entry.caller }
    return { scope, runId: entry.runId, entry: entry.id, createdAt: Date.parse(queued.created_at), webhook: undefined, request: UNREAD_REQUEST, unread: true, ...priority }
  }

  /** An entry read after its take was abandoned: queued again, for whoever takes next. */
  async #giveBack (entry: QueueEntry): Promise<void> {
    const keys = new ScopeKeys(scopeOfQueue(entry.queue))
    await RELEASE.run(this.#ctx.redis, [keys.run(entry.runId), keys.queue], [entry.id, entry.runId]).catch(() => {})
  }
}


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
