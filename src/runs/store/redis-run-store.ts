import { randomBytes, randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import type * as IoRedis from 'ioredis'
import type { RedisOptions } from 'ioredis'
import {
  AsyncQueueFullError, EventBeyondLastError, RunFinishedError, RunIdTakenError, RunNotAsyncError,
  RunNotFoundError, RunStoreUnavailableError
} from '../../errors.ts'
import { RedisFollow } from './redis/redis-follow.ts'
import { APPEND_EVENT, CLAIM_KEY, DELIVERY_DONE, DROP_KEY, FINISH_RECORDED, GROUP, HOLD_DELIVERY, KEEP_ANSWER, RELEASE, SENDERS, SUBMIT, TRANSITION, WAITING, WEBHOOK_STATE } from './redis/redis-scripts.ts'
import { canceledRecord, finishedRecord, isFinished, queuedRecord, REPLICA_LOST, startedRecord } from '../run-record.ts'
import type {
  HeldDelivery, KeptAnswer, KeyAnswer, KeyClaim, KeyEntry, NewDelivery, NewRun, RunEventItem, RunOutcome, RunRecord, RunScope, RunStore, RunStoreListener, RunStoreSettings,
  RunView, StoredWebhook, TakenRun, WebhookStatus
} from './run-store.ts'
import { requireCjs } from '../../shared/require-cjs.ts'

const { Redis } = requireCjs('ioredis') as typeof IoRedis
type Redis = IoRedis.Redis

export interface RedisRunStoreOptions {
  /** How often this store tells Redis it still holds its runs (default 10 s). */
  readonly heartbeatMs?: number
  /** A run held this long without a heartbeat belongs to a lost sidecar (default 30 s). */
  readonly lostAfterMs?: number
  /** This store's consumer name (default `<host>-<pid>-<random>`). */
  readonly consumer?: string
}

/** The stored request, without its body (kept as raw bytes beside it). */
interface RequestJson { method: string, path: string, headers: string[], hasBody: boolean }

/** Keys of one app's runs; the hash tag keeps them in one Redis Cluster slot. */
class ScopeKeys {
  readonly name: string
  readonly queue: string
  readonly #prefix: string
  constructor (scope: RunScope) {
    this.name = `${scope.projectId}/${scope.appName}`
    this.#prefix = `as:{${this.name}}`
    this.queue = `${this.#prefix}:queue`
  }

  run (runId: string): string { return `${this.#prefix}:run:${runId}` }
  slot (slot: string): string { return `${this.#prefix}:key:${slot}` }
  get deliveries (): string { return `${this.#prefix}:deliveries` }
  delivery (id: string): string { return `${this.#prefix}:delivery:${id}` }
  events (runId: string): string { return `${this.#prefix}:events:${runId}` }
  live (runId: string): string { return `${this.#prefix}:live:${runId}` }
}

const SCOPES_KEY = 'as:scopes'
const CANCEL_CHANNEL = 'as:cancel'

/** How long a delivery is kept at most, should every sidecar that could finish it be gone (a day). */
const DELIVERY_TTL_SECONDS = 86_400

/** The consumer group of a stream this store holds entries of: an app's queue (runs) or its deliveries. */
const groupOf = (stream: string): string => stream.endsWith(':deliveries') ? SENDERS : GROUP

/** The commands this store sends with `redis.call` (kept out of the auto-pipeline, see the constructor). */
const SENT_WITH_CALL = ['XCLAIM', 'XAUTOCLAIM', 'CLIENT']

/** How long a recorded sync run's record outlives RUN_RETENTION_SECONDS while it runs (a day). */
const RECORDED_RUN_GRACE_SECONDS = 86_400

/** How long one blocking read of the queue waits before looking again (new scopes, a stop). */
const BLOCK_MS = 2000

/**
 * The run store in Redis (RUN_STORE_URL), shared by every sidecar given the same URL. Streams
 * with a consumer group queue the runs: a run handed to a sidecar stays in its pending list until
 * it ends, and the sidecar refreshes its claim (XCLAIM … JUSTID) as a heartbeat; a run whose
 * sidecar stops doing so is taken over by another (XAUTOCLAIM) and, if it had started, failed
 * with "replica lost". Records are hashes (compare-and-set by Lua script), events are streams,
 * followers and cancels hear of changes through pub/sub.
 */
export class RedisRunStore implements RunStore {
  readonly shared = true
  readonly #settings: RunStoreSettings
  readonly #consumer: string
  readonly #heartbeatMs: number
  readonly #lostAfterMs: number
  /** Requests: fail fast while Redis is down (503), never queue behind an outage. */
  readonly #redis: Redis
  /** The blocking queue reads (a blocking command needs a connection of its own). */
  readonly #blocking: Redis
  readonly #follow: RedisFollow
  /** Entries this store holds (taken, not ended), by id: the heartbeat keeps them claimed. */
  readonly #held = new Map<string, string>()
  /** Runs taken over from a lost sidecar before they started: handed out by take() first. */
  readonly #reclaimed: TakenRun[] = []
  readonly #groups = new Set<string>()
  /** The queues the last blocking read waits on, and its connection's id (to end the wait when a scope is added). */
  #reading: readonly string[] = []
  #blockingId: number | undefined
  #scopeAdded: (() => void) | undefined
  readonly #timer: NodeJS.Timeout
  #listener: RunStoreListener | undefined
  /** Idempotency-Key slots this store claimed whose answer is not kept yet: their lease is renewed with the heartbeat. */
  readonly #claims = new Set<string>()
  /** Deliveries are being left (SIGTERM): this store takes none over any more, its own included. */
  #leaving = false
  #available = false
  #closed = false

  constructor (url: string, settings: RunStoreSettings, options: RedisRunStoreOptions = {}) {
    this.#settings = settings
    this.#consumer = options.consumer ?? `${hostname()}-${process.pid}-${randomBytes(4).toString('hex')}`
    this.#heartbeatMs = options.heartbeatMs ?? 10_000
    this.#lostAfterMs = options.lostAfterMs ?? 30_000
    const common: RedisOptions = { retryStrategy: times => Math.min(100 * times, 1000), connectionName: `app-sidecar ${this.#consumer}` }
    // auto-pipelining: the commands of every call in one turn of the event loop go out in one
    // write (and Redis answers them in one): far fewer syscalls on both sides under load. A
    // command sent with `call` loses its name in an auto-pipeline (redis/ioredis#1923): the ones
    // this store sends that way are sent alone
    this.#redis = new Redis(url, {
      ...common, enableOfflineQueue: false, maxRetriesPerRequest: 1, enableAutoPipelining: true, autoPipeliningIgnoredCommands: SENT_WITH_CALL
    })
    this.#blocking = new Redis(url, { ...common, maxRetriesPerRequest: null })
    const subscriber = new Redis(url, { ...common, maxRetriesPerRequest: null })
    this.#follow = new RedisFollow(this.#redis, subscriber, guard)
    for (const client of [this.#redis, this.#blocking, subscriber]) client.on('error', () => {}) // reported through availability
    this.#redis.on('ready', () => { this.#setAvailable(true) })
    this.#blocking.on('ready', () => {
      this.#blocking.client('ID').then(id => { this.#blockingId = Number(id) }, () => {})
    })
    this.#redis.on('close', () => { this.#setAvailable(false) })
    this.#follow.onMessage(CANCEL_CHANNEL, message => {
      const [projectId, appName, runId] = message.split('/') as [string, string, string]
      this.#listener?.canceled({ projectId, appName }, runId)
    })
    this.#timer = setInterval(() => { void this.#keepAndReap() }, this.#heartbeatMs)
    this.#timer.unref()
  }

  get available (): boolean { return this.#available }

  /** How long an Idempotency-Key claim outlives its sidecar's last heartbeat: as long as a lost sidecar's runs. */
  get #claimLeaseMs (): number { return this.#lostAfterMs + this.#heartbeatMs }

  /** Resolves once Redis is reachable, or after `ms` (the sidecar starts either way). */
  async reachable (ms: number): Promise<boolean> {
    if (this.#available) return true
    return await new Promise(resolve => {
      const timer = setTimeout(() => { this.#redis.off('ready', ready); resolve(false) }, ms)
      const ready = (): void => { clearTimeout(timer); resolve(true) }
      this.#redis.once('ready', ready)
    })
  }

  listen (listener: RunStoreListener): void { this.#listener = listener }

  async submit (run: NewRun): Promise<RunView> {
    const keys = new ScopeKeys(run.scope)
    const record = queuedRecord(run)
    const request: RequestJson = { method: run.request.method, path: run.request.path, headers: [...run.request.headers], hasBody: run.request.body !== null }
    const outcome = await guard(SUBMIT.run(this.#redis, [keys.run(run.runId), keys.queue, SCOPES_KEY], [
      JSON.stringify(record), JSON.stringify(request), run.request.body ?? '',
      run.webhook === undefined ? '' : JSON.stringify(run.webhook), this.#settings.queueDepth, keys.name, run.runId
    ]))
    if (outcome === -1) throw new RunIdTakenError()
    if (outcome === -2) throw new AsyncQueueFullError()
    if (this.#settings.scope === undefined && !this.#reading.includes(keys.queue)) this.#wakeReader()
    return { record, resultJson: undefined, async: true }
  }

  async get (scope: RunScope, runId: string): Promise<RunView> {
    const [view] = await this.#read(new ScopeKeys(scope), runId)
    return view
  }

  async cancel (scope: RunScope, runId: string): Promise<RunView> {
    const keys = new ScopeKeys(scope)
    for (;;) {
      const [view, raw, entry] = await this.#read(keys, runId)
      if (!view.async) throw new RunNotAsyncError()
      if (isFinished(view.record)) throw new RunFinishedError()
      const canceled = canceledRecord(view.record, Date.now())
      const changed = await this.#transition(keys, runId, raw, canceled.record, { result: canceled.resultJson, entry, done: true })
      if (!changed) continue
      if (view.record.status === 'running') await guard(this.#redis.publish(CANCEL_CHANNEL, `${keys.name}/${runId}`))
      return { record: canceled.record, resultJson: canceled.resultJson, async: true }
    }
  }

  async take (signal: AbortSignal): Promise<TakenRun> {
    while (!signal.aborted && !this.#closed) {
      const reclaimed = this.#reclaimed.shift()
      if (reclaimed !== undefined) return reclaimed
      const queues = await this.#servedQueues()
      this.#reading = queues
      if (queues.length === 0) {
        await abortable(new Promise<void>(resolve => {
          this.#scopeAdded = resolve
          setTimeout(resolve, BLOCK_MS).unref()
        }), signal)
        continue
      }
      const read = this.#readQueue(queues)
      const reply = await abortable(read, signal)
      if (reply === ABORTED) {
        // the blocked read may still bring a run: it goes back to the queue, not lost
        void read.then(async entry => { if (entry !== undefined) await this.#giveBack(entry) }, () => {})
        break
      }
      if (reply === undefined) continue
      const run = await this.#taken(reply)
      if (run !== undefined) return run
    }
    throw signal.reason ?? new Error('run store closed')
  }

  async start (run: TakenRun, startedAt: number): Promise<boolean> {
    const keys = new ScopeKeys(run.scope)
    for (;;) {
      const [view, raw] = await this.#readOrMissing(keys, run.runId)
      if (view === undefined || view.record.status !== 'queued') {
        await this.#forget(keys, run.entry)
        return false
      }
      const started = startedRecord(view.record, run.createdAt, startedAt)
      if (await this.#transition(keys, run.runId, raw, started, { owner: this.#consumer })) return true
    }
  }

  async release (run: TakenRun): Promise<void> {
    const keys = new ScopeKeys(run.scope)
    await guard(RELEASE.run(this.#redis, [keys.run(run.runId), keys.queue], [run.entry, run.runId]))
    this.#held.delete(run.entry)
  }

  appendEvent (run: TakenRun, n: number, data: string): void {
    const keys = new ScopeKeys(run.scope)
    APPEND_EVENT.run(this.#redis, [keys.run(run.runId), keys.events(run.runId)], [`0-${n + 1}`, data, this.#settings.maxEvents, keys.live(run.runId), `${n}\n${data}`])
      .catch(() => {}) // Redis down: the event is missing from the store; the result still has it
  }

  async finish (run: TakenRun, outcome: RunOutcome, keep?: KeyAnswer): Promise<RunView> {
    const keys = new ScopeKeys(run.scope)
    if (run.running !== undefined) {
      // a recorded sync call: its record is as written with its key's claim unless something
      // changed it (nothing can: it cannot be canceled), so no read first; its answer goes with it
      const finished = finishedRecord(run.running, outcome)
      const done: RunView = { record: finished, resultJson: outcome.resultJson, async: false }
      const old = run.runningJson ?? JSON.stringify(run.running)
      if (keep === undefined) {
        if (await this.#transition(keys, run.runId, old, finished, { result: outcome.resultJson, done: true })) return done
      } else {
        const slot = keys.slot(keep.slot)
        this.#claims.delete(slot)
        const { answer } = keep
        if (await guard(FINISH_RECORDED.run(this.#redis, [keys.run(run.runId), keys.events(run.runId), slot], [
          old, JSON.stringify(finished), outcome.resultJson, this.#settings.retentionSeconds, keys.live(run.runId), run.runId,
          answer.status, answer.contentType ?? '', answer.body, this.#settings.retentionSeconds * 1000
        ])) === 1) return done
      }
    }
    if (keep !== undefined) await this.keepAnswer(run.scope, keep.slot, run.runId, keep.answer)
    for (;;) {
      const [view, raw] = await this.#read(keys, run.runId)
      if (view.record.status !== 'running') {
        await this.#forget(keys, run.entry)
        return view // a cancel came first
      }
      const finished = finishedRecord(view.record, outcome)
      if (await this.#transition(keys, run.runId, raw, finished, { result: outcome.resultJson, entry: run.entry, done: true })) {
        this.#held.delete(run.entry)
        return { record: finished, resultJson: outcome.resultJson, async: view.async }
      }
    }
  }

  async webhookDone (scope: RunScope, runId: string, status: WebhookStatus, attempts: number): Promise<void> {
    const changed = await guard(WEBHOOK_STATE.run(this.#redis, [new ScopeKeys(scope).run(runId)], [status, attempts]))
    if (changed === 0) throw new RunNotFoundError()
  }

  async follow (scope: RunScope, runId: string, after: number, signal: AbortSignal): Promise<AsyncIterable<RunEventItem>> {
    const keys = new ScopeKeys(scope)
    await this.#read(keys, runId) // 404 before any event
    const last = await this.#follow.lastEvent(keys.events(runId))
    if (after > last) throw new EventBeyondLastError(after, last)
    // subscribed before the first read of the events: nothing appended meanwhile is missed
    const listening = await this.#follow.listen(keys.live(runId), signal)
    return this.#follow.events(listening, keys.events(runId), after + 1, async () => await this.#finishedView(keys, runId))
  }

  async claimKey (scope: RunScope, slot: string, claim: KeyClaim, run?: TakenRun): Promise<KeyEntry | undefined> {
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    // a claim whose first request still runs holds a lease its sidecar renews: should the sidecar
    // die, the key is free again (a retry runs) once the lease runs out, not after RUN_RETENTION_SECONDS.
    // A sync run recorded with it is in no queue, so no other sidecar can tell its sidecar died:
    // should it, the record shows "running" until its TTL (its caller saw the connection drop)
    const held = await guard(CLAIM_KEY.runBuffer(this.#redis, [key, keys.run(run?.runId ?? claim.runId)], [
      claim.runId, claim.digest, claim.async ? '1' : '0', this.#claimLeaseMs,
      run?.runningJson ?? '', this.#consumer,
      run?.webhook === undefined ? '' : JSON.stringify(run.webhook), this.#settings.retentionSeconds + RECORDED_RUN_GRACE_SECONDS
    ])) as Array<Buffer | null> | null | number
    if (held === -1) throw new RunIdTakenError()
    if (held === null) {
      this.#claims.add(key)
      return undefined
    }
    const [runId, digest, async, status, type, body] = held as Array<Buffer | null>
    return {
      runId: String(runId),
      digest: String(digest),
      async: String(async) === '1',
      answer: status === null || status === undefined
        ? undefined
        : { status: Number(String(status)), contentType: type === null || type === undefined || type.length === 0 ? undefined : String(type), body: body ?? Buffer.alloc(0) }
    }
  }

  async keepAnswer (scope: RunScope, slot: string, runId: string, answer: KeptAnswer): Promise<void> {
    const key = new ScopeKeys(scope).slot(slot)
    this.#claims.delete(key)
    await guard(KEEP_ANSWER.run(this.#redis, [key],
      [runId, answer.status, answer.contentType ?? '', answer.body, this.#settings.retentionSeconds * 1000]))
  }

  async dropKey (scope: RunScope, slot: string, runId: string, forgetRun = false): Promise<void> {
    const keys = new ScopeKeys(scope)
    const key = keys.slot(slot)
    this.#claims.delete(key)
    await guard(DROP_KEY.run(this.#redis, [key, keys.run(runId)], [runId, forgetRun ? '1' : '0']))
  }

  async holdDelivery (delivery: NewDelivery): Promise<HeldDelivery | undefined> {
    const keys = new ScopeKeys(delivery.scope)
    const id = randomUUID()
    const entry = String(await guard(HOLD_DELIVERY.run(this.#redis, [keys.deliveries, keys.delivery(id), SCOPES_KEY], [
      delivery.runId, delivery.url, delivery.body, delivery.secret ?? '', this.#consumer, keys.name, DELIVERY_TTL_SECONDS, id,
      delivery.trace?.traceparent ?? '', delivery.trace?.tracestate ?? ''
    ])))
    this.#held.set(entry, keys.deliveries)
    return { ...delivery, attempts: 0, entry: `${entry} ${id}` }
  }

  async deliveryAttempt (delivery: HeldDelivery): Promise<void> {
    const [, id] = delivery.entry.split(' ') as [string, string]
    await guard(this.#redis.hincrby(new ScopeKeys(delivery.scope).delivery(id), 'attempts', 1))
  }

  async deliveryDone (delivery: HeldDelivery): Promise<void> {
    const keys = new ScopeKeys(delivery.scope)
    const [entry, id] = delivery.entry.split(' ') as [string, string]
    this.#held.delete(entry)
    await guard(DELIVERY_DONE.run(this.#redis, [keys.deliveries, keys.delivery(id)], [entry]))
  }

  async leaveDelivery (delivery: HeldDelivery, stopping: boolean): Promise<void> {
    const keys = new ScopeKeys(delivery.scope)
    const [entry] = delivery.entry.split(' ') as [string, string]
    this.#held.delete(entry)
    if (stopping) this.#leaving = true
    // idle as long as a lost sidecar's: the next sidecar to look takes it over
    await guard(this.#redis.call('XCLAIM', keys.deliveries, SENDERS, this.#consumer, 0, entry, 'IDLE', this.#lostAfterMs + 1, 'JUSTID'))
  }

  async queuedCount (): Promise<number> {
    const queues = await this.#servedQueues()
    if (queues.length === 0) return 0
    return Number(await guard(WAITING.run(this.#redis, queues, [])))
  }

  async close (): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    clearInterval(this.#timer)
    this.#follow.close()
    this.#blocking.disconnect()
    this.#redis.disconnect()
  }

  /** A scope the blocking read does not wait on got a run: the read starts again with it. */
  #wakeReader (): void {
    const added = this.#scopeAdded
    this.#scopeAdded = undefined
    added?.()
    if (this.#reading.length > 0 && this.#blockingId !== undefined) void this.#redis.call('CLIENT', 'UNBLOCK', this.#blockingId).catch(() => {})
  }

  #setAvailable (available: boolean): void {
    if (this.#available === available || this.#closed) return
    this.#available = available
    if (available) this.#groups.clear() // the server may have restarted empty
    this.#listener?.availability(available)
  }

  /** The queue keys of the served scope(s): the configured one, else every scope that had a submission. */
  async #servedQueues (): Promise<string[]> {
    const scope = this.#settings.scope
    if (scope !== undefined) return [new ScopeKeys(scope).queue]
    const names = await guard(this.#redis.smembers(SCOPES_KEY))
    return names.map(name => {
      const [projectId, appName] = name.split('/') as [string, string]
      return new ScopeKeys({ projectId, appName }).queue
    })
  }

  /** One entry from the oldest end of the served queues, or undefined after BLOCK_MS. */
  async #readQueue (queues: string[]): Promise<{ queue: string, id: string, runId: string } | undefined> {
    for (const queue of queues) {
      if (this.#groups.has(queue)) continue
      await this.#blocking.xgroup('CREATE', queue, GROUP, '0', 'MKSTREAM').catch((error: Error) => {
        if (!error.message.startsWith('BUSYGROUP')) throw error
      })
      this.#groups.add(queue)
    }
    let reply: unknown
    try {
      reply = await this.#blocking.call('XREADGROUP', 'GROUP', GROUP, this.#consumer, 'COUNT', 1, 'BLOCK', BLOCK_MS,
        'STREAMS', ...queues, ...queues.map(() => '>'))
    } catch (error) {
      if (String((error as Error).message).startsWith('NOGROUP')) this.#groups.clear()
      throw error
    }
    if (reply === null) return undefined
    // [[key, entries], …] (RESP2) or [key, entries, …] (ioredis 6 reads the RESP3 map flat)
    const list = reply as unknown[]
    const [queue, entries] = (typeof list[0] === 'string' ? list : list[0]) as [string, Array<[string, string[]]>]
    const [id, fields] = entries[0] as [string, string[]]
    return { queue, id, runId: fields[1] as string }
  }

  /** The run an entry names, held by this store; undefined (the entry dropped) when it is no longer queued. */
  async #taken (entry: { queue: string, id: string, runId: string }): Promise<TakenRun | undefined> {
    const scope = scopeOfQueue(entry.queue)
    const keys = new ScopeKeys(scope)
    const [record, request, body, webhook] = await guard(this.#redis.hmgetBuffer(keys.run(entry.runId), 'record', 'request', 'body', 'webhook')) as Array<Buffer | null>
    if (record === undefined || request === undefined || body === undefined || webhook === undefined) return undefined
    const parsed = record === null ? undefined : JSON.parse(record.toString()) as RunRecord
    if (parsed === undefined || request === null || parsed.status !== 'queued') {
      await this.#forget(keys, entry.id)
      return undefined
    }
    this.#held.set(entry.id, entry.queue)
    const req = JSON.parse(request.toString()) as RequestJson
    return {
      scope,
      runId: entry.runId,
      entry: entry.id,
      createdAt: Date.parse(parsed.created_at),
      webhook: webhook === null ? undefined : JSON.parse(webhook.toString()) as StoredWebhook,
      request: { method: req.method, path: req.path, headers: req.headers, body: req.hasBody ? body : null }
    }
  }

  /** An entry read after its take was abandoned: queued again, for whoever takes next. */
  async #giveBack (entry: { queue: string, id: string, runId: string }): Promise<void> {
    const keys = new ScopeKeys(scopeOfQueue(entry.queue))
    await RELEASE.run(this.#redis, [keys.run(entry.runId), keys.queue], [entry.id, entry.runId]).catch(() => {})
  }

  /** Acknowledges and deletes an entry whose run will not run here. */
  async #forget (keys: ScopeKeys, entry: string): Promise<void> {
    this.#held.delete(entry)
    if (entry === '') return
    await guard(this.#redis.multi().xack(keys.queue, GROUP, entry).xdel(keys.queue, entry).exec())
  }

  async #read (keys: ScopeKeys, runId: string): Promise<[RunView, string, string]> {
    const [view, raw, entry] = await this.#readOrMissing(keys, runId)
    if (view === undefined) throw new RunNotFoundError()
    return [view, raw, entry]
  }

  async #readOrMissing (keys: ScopeKeys, runId: string): Promise<[RunView | undefined, string, string]> {
    const [raw, result, async, entry] = await guard(this.#redis.hmget(keys.run(runId), 'record', 'result', 'async', 'entry'))
    if (raw === null || raw === undefined) return [undefined, '', '']
    return [{ record: JSON.parse(raw) as RunRecord, resultJson: result ?? undefined, async: async === '1' }, raw, entry ?? '']
  }

  async #finishedView (keys: ScopeKeys, runId: string): Promise<RunView | undefined> {
    const [view] = await this.#readOrMissing(keys, runId)
    return view === undefined || isFinished(view.record) ? view : undefined
  }

  /** Compare-and-set of the record; a finished record gets its TTL, and its followers the end. */
  async #transition (keys: ScopeKeys, runId: string, old: string, record: RunRecord,
    extra: { result?: string | undefined, owner?: string, entry?: string, done?: boolean }): Promise<boolean> {
    const finished = isFinished(record)
    const changed = await guard(TRANSITION.run(this.#redis, [keys.run(runId), keys.queue, keys.events(runId)], [
      old, JSON.stringify(record), extra.result ?? '', extra.owner ?? '', extra.entry ?? '',
      finished ? this.#settings.retentionSeconds : 0, keys.live(runId), extra.done === true ? 'done' : ''
    ]))
    return changed === 1
  }

  /** Heartbeat: refreshes the claim on every entry held; then takes over the entries of lost sidecars. */
  async #keepAndReap (): Promise<void> {
    if (!this.#available || this.#closed) return
    try {
      const byQueue = new Map<string, string[]>()
      for (const [id, queue] of this.#held) {
        const ids = byQueue.get(queue)
        if (ids === undefined) byQueue.set(queue, [id])
        else ids.push(id)
      }
      for (const [stream, ids] of byQueue) await this.#redis.call('XCLAIM', stream, groupOf(stream), this.#consumer, 0, ...ids, 'JUSTID')
      if (this.#claims.size > 0) {
        const renew = this.#redis.pipeline()
        for (const key of this.#claims) renew.pexpire(key, this.#claimLeaseMs)
        await renew.exec()
      }
      for (const queue of await this.#servedQueues()) {
        await this.#reap(queue)
        await this.#reapDeliveries(new ScopeKeys(scopeOfQueue(queue)))
      }
    } catch {} // Redis went away meanwhile: the next beat tries again
  }

  async #reap (queue: string): Promise<void> {
    const reply = await this.#redis.call('XAUTOCLAIM', queue, GROUP, this.#consumer, this.#lostAfterMs, '0-0', 'COUNT', 100)
      .catch(() => undefined) as [string, Array<[string, string[] | null]>] | undefined
    if (reply === undefined) return
    const scope = scopeOfQueue(queue)
    const keys = new ScopeKeys(scope)
    for (const [id, fields] of reply[1]) {
      const runId = fields?.[1]
      if (runId === undefined) continue
      const [view, raw] = await this.#readOrMissing(keys, runId)
      if (view?.record.status === 'queued') {
        const run = await this.#taken({ queue, id, runId })
        if (run !== undefined) this.#reclaimed.push(run)
      } else if (view?.record.status === 'running') {
        await this.#failLost(keys, runId, id, view, raw)
      } else {
        await this.#forget(keys, id)
      }
    }
  }

  /** Deliveries of lost (or stopped) sidecars: this one holds them now and makes their remaining attempts. */
  async #reapDeliveries (keys: ScopeKeys): Promise<void> {
    if (this.#leaving) return
    const reply = await this.#redis.call('XAUTOCLAIM', keys.deliveries, SENDERS, this.#consumer, this.#lostAfterMs, '0-0', 'COUNT', 100)
      .catch(() => undefined) as [string, Array<[string, string[] | null]>] | undefined
    if (reply === undefined) return
    const scope = scopeOfQueue(keys.queue)
    for (const [entry, fields] of reply[1]) {
      const id = fields?.[1]
      const stored = id === undefined ? {} : await this.#redis.hgetall(keys.delivery(id))
      if (id === undefined || stored.run === undefined || stored.url === undefined || stored.body === undefined) {
        await this.#redis.multi().xack(keys.deliveries, SENDERS, entry).xdel(keys.deliveries, entry).exec()
        continue
      }
      this.#held.set(entry, keys.deliveries)
      this.#listener?.deliveryLost?.({
        scope,
        runId: stored.run,
        url: stored.url,
        body: stored.body,
        secret: stored.secret,
        trace: stored.traceparent === undefined ? undefined : { traceparent: stored.traceparent, tracestate: stored.tracestate === '' ? undefined : stored.tracestate },
        attempts: Number(stored.attempts ?? 0),
        entry: `${entry} ${id}`
      })
    }
  }

  /** A run whose sidecar was lost mid-run: failed, never run again; this sidecar sends its webhook. */
  async #failLost (keys: ScopeKeys, runId: string, entry: string, view: RunView, raw: string): Promise<void> {
    const now = Date.now()
    const startedAt = view.record.started_at === undefined ? now : Date.parse(view.record.started_at)
    const resultJson = JSON.stringify({ message: REPLICA_LOST.message })
    const record = finishedRecord(view.record, {
      status: 'failed', statusCode: REPLICA_LOST.statusCode, resultJson, runTimeMs: now - startedAt, error: REPLICA_LOST.message, completedAt: now
    })
    const webhook = await this.#redis.hget(keys.run(runId), 'webhook')
    if (!await this.#transition(keys, runId, raw, record, { result: resultJson, entry, done: true })) return
    const run: TakenRun = {
      scope: scopeOfQueue(keys.queue),
      runId,
      entry: '',
      createdAt: Date.parse(view.record.created_at),
      webhook: webhook === null ? undefined : JSON.parse(webhook) as StoredWebhook,
      request: { method: '', path: '', headers: [], body: null }
    }
    this.#listener?.lost(run, { record, resultJson, async: view.async })
  }
}

/** Any failure to reach Redis becomes the 503 of recorded-run requests; Redis's own error replies are bugs and pass. */
async function guard<T> (pending: Promise<T>): Promise<T> {
  try {
    return await pending
  } catch (error) {
    if ((error as Error).name === 'ReplyError') throw error
    throw new RunStoreUnavailableError((error as Error).message)
  }
}

function scopeOfQueue (queue: string): RunScope {
  const name = queue.slice(queue.indexOf('{') + 1, queue.indexOf('}'))
  const [projectId, appName] = name.split('/') as [string, string]
  return { projectId, appName }
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


