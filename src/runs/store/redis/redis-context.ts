import { randomBytes } from 'node:crypto'
import type { RedisOptions } from 'ioredis'
import { LRUCache } from 'lru-cache'
import type { RunStoreAddress } from '../../../config/run-store-address.ts'
import { RunNotFoundError, RunStoreUnavailableError } from '../../../errors.ts'
import { isFinished, withWebhook } from '../../run-record.ts'
import type { RunStoreListener, RunStoreSettings } from '../run-store.ts'
import type { RunRecord, RunScope, RunView, WebhookStatus } from '../../run-data.ts'
import type { WebhookTarget } from '../../../webhook/webhook-endpoint.ts'
import { channelsOf, type Channels } from './redis-channels.ts'
import { connectRedis, isCluster, type RedisClient, runStoreAddress } from './redis-connect.ts'
import { RedisFollow } from './redis-follow.ts'
import { COMMAND_TIMEOUT_MS, plainWords, reconnectOnReadonly, type ReplyLike, unavailableReply } from './redis-replies.ts'
import type { FieldsOf } from './redis-named-script.ts'
import { GROUP, QUEUE_SCRIPTS, TAKE, type TakeOutcome } from './redis-queue-scripts.ts'
import { answerWithin } from './redis-deadline.ts'
import { indexCutoff } from './redis-run-index.ts'
import { DEFAULT_QUEUE_TTL_SECONDS } from '../../run-expiry.ts'
import { DROP_ENTRY, END_AND_HOLD, END_AND_TAKE, HOLD_DELIVERY, SCRIPTS, TRANSITION } from './redis-scripts.ts'
import { RedisLease } from './redis-lease.ts'

type Redis = RedisClient

export interface RedisRunStoreOptions {
  /** How often this store tells Redis it still holds its runs (default 10 s). */
  readonly heartbeatMs?: number
  /** A run held this long without a heartbeat belongs to a lost sidecar (default 30 s). */
  readonly lostAfterMs?: number
  /** This sidecar's replica name: its consumer name in the app's groups, and the end of its connections' name (default: a random id). */
  readonly consumer?: string
}

/** Keys of one app's runs; the hash tag keeps them in one Redis Cluster slot. */
export class ScopeKeys {
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
  /** The version before's set of the app's async runs started and not ended: its runs leave it as they end here (this version keeps none). */
  get running (): string { return `${this.#prefix}:running` }
  /** The app's due set (a sorted set, epoch ms): queued runs by a `Cancel-After` sooner than ASYNC_QUEUE_TTL_SECONDS (that one is found from the queued index), leases, deliveries left. */
  get expiry (): string { return `${this.#prefix}:expiry` }
  /** The app's queued runs in the order they are taken (a sorted set: redis-queue-scripts.ts), with what orders them: callers' finish tags and the urgencies' virtual time (`fair`), and a wake-up list. */
  get turns (): string { return `${this.#prefix}:turns` }
  get fair (): string { return `${this.#prefix}:fair` }
  get wake (): string { return `${this.#prefix}:wake` }
  /** The app's keyed sync runs' claims still running, by their sidecar's last heartbeat (a sorted set of slot keys, Redis's clock in ms). */
  get claims (): string { return `${this.#prefix}:claims` }
  /** Request-body bytes of the app's queued runs (ASYNC_QUEUE_MAX_BYTES). */
  get queuedBytes (): string { return `${this.#prefix}:queued-bytes` }
  live (runId: string): string { return `${this.#prefix}:live:${runId}` }
  /** The prefix of the app's indexes of its recorded runs, one per status (`…:runs:<status>`, redis-run-index.ts): the list of runs. */
  get runs (): string { return `${this.#prefix}:runs` }
  /** Never written: the availability probe's write to the app's slot on a cluster. */
  get probe (): string { return `${this.#prefix}:probe` }
  /** The app's cancel channel: a running run's sidecar hears its cancel there. */
  get cancel (): string { return `${this.#prefix}:cancel` }
}

/** What a transition writes besides the record: its result, its owner, its queue entry acknowledged, a `done` message. */
export interface TransitionExtra { readonly result?: string | undefined, readonly owner?: string, readonly entry?: string, readonly done?: boolean }

/** A run this store ended: what its end wrote, to write it again if a failover lost it. */
export interface EndedRun {
  readonly keys: ScopeKeys
  readonly runId: string
  readonly record: RunRecord
  readonly resultJson: string | undefined
}

/** A Redis store's settings: it always serves one app (PROJECT_ID and APP_NAME), never the whole store. */
export interface RedisStoreSettings extends RunStoreSettings {
  readonly scope: RunScope
}

/** A run's webhook as Redis keeps it: JSON, the URL as its href (as JSON.stringify writes a WebhookTarget). */
export function parseWebhook (json: string): WebhookTarget {
  const { url, secret } = JSON.parse(json) as { url: string, secret?: string }
  return { url: new URL(url), secret }
}

/** The records of runs held kept to compare against: at most this many. */
const KNOWN_MAX = 10_000

/** How long after ioredis gives a connection up it is made again. */
const RECONNECT_ENDED_MS = 1000

/** How often the store's availability is checked while it is taken for unavailable, until it answers as a primary (sidecar_run_store_up). */
const PROBE_MS = 2000

/**
 * Told when a command finds the store unavailable (no answer in time, an unavailable reply): each
 * context checks its own store at once. A store that answers is not probed: a stall or a demotion
 * shows in the commands that meet it.
 */
const suspicions = new Set<() => void>()

/**
 * What the Redis store's roles (queue, records, key claims, deliveries) and its reaper share: the
 * connections, this sidecar's consumer name and timing, the entries and claims it holds, and the
 * reads and writes of run records more than one of them makes.
 */
export class RedisContext {
  readonly settings: RedisStoreSettings
  /** The keys of the one app this store serves: the only queue and deliveries it takes from. */
  readonly own: ScopeKeys
  readonly consumer: string
  readonly heartbeatMs: number
  readonly lostAfterMs: number
  /** Requests: fail fast while Redis is down (503), never queue behind an outage. */
  readonly redis: Redis
  /** The blocking wait for a queued run's wake-up (a blocking command needs a connection of its own). */
  readonly blocking: Redis
  readonly follow: RedisFollow
  /** The app's channels (cancels, followed runs), on the request connection. */
  readonly channels: Channels
  /** The topology's publish: PUBLISH on one server, SPUBLISH (sharded, the channel in the keys' slot) on a cluster. */
  readonly #publish: 'PUBLISH' | 'SPUBLISH'
  /** What this store holds, which its heartbeat keeps (redis-lease.ts); `holding` is told when it starts holding. */
  readonly lease: RedisLease<EndedRun>
  /**
   * The record of each run this store holds as it last wrote or read it, by entry: the start and
   * the end compare-and-set against it without reading it first (one round trip each; a cancel
   * meanwhile makes it fail, and the record is read then).
   */
  readonly known = new LRUCache<string, string>({ max: KNOWN_MAX })
  /** The queues whose consumer group this store knows exists. */
  readonly groups = new Set<string>()
  #listener: RunStoreListener | undefined
  /** Told when this store starts holding something (the run store starts its heartbeat). */
  holding: (() => void) | undefined
  /** Told when this store's own pending entries should be looked at (a take's answer lost). */
  checkOwn: (() => void) | undefined
  /** Told of a time something of the app falls due (a run this store queued, at its time limit). */
  dueAt: ((at: number) => void) | undefined
  closed = false
  /** Undefined until first known: a store down at start is an outage too (logged). */
  #available: boolean | undefined = undefined
  /** Why the store was last found unusable, in plain words (the outage's log line). */
  #problem = 'not connected'
  /** The database number RUN_STORE_URL names (0 on a cluster). */
  readonly #db: number
  /** Set once the server refused that database: the store stays unavailable. */
  #refused: string | undefined = undefined
  /** The probe while the store is taken for unavailable. */
  #probe: NodeJS.Timeout | undefined
  #checking = false
  readonly #suspect = (): void => { if (this.#available) this.#check() }

  constructor (address: RunStoreAddress | string, settings: RedisStoreSettings, options: RedisRunStoreOptions) {
    this.settings = settings
    this.own = new ScopeKeys(settings.scope)
    this.consumer = options.consumer ?? randomBytes(6).toString('hex')
    this.heartbeatMs = options.heartbeatMs ?? 10_000
    this.lostAfterMs = options.lostAfterMs ?? 30_000
    this.lease = new RedisLease(this.lostAfterMs, () => { this.holding?.() })
    // two connections, both named (CLIENT SETNAME takes no space): requests and pub/sub share one
    // (RESP3 pushes), the blocking queue read has the other
    const common: RedisOptions = {
      retryStrategy: times => Math.min(100 * times, 1000), protocol: 3, connectionName: `app-sidecar:${this.own.name}:${this.consumer}`
    }
    // no auto-pipelining: ioredis keeps one auto-pipelined batch in flight at a time, so a run's
    // end sent while another slot's was on its way waited a whole round trip behind it (every
    // command is written at once instead, and many stay in flight). Its channels are subscribed
    // again by RedisFollow.
    // A Redis that stops answering (paused, partitioned) costs a request COMMAND_TIMEOUT_MS, then 503;
    // a demoted primary's connection is dropped, so the next one reaches whatever the address names now
    const target = runStoreAddress(address)
    this.#db = target.topology === 'single' ? Number(target.url.pathname.slice(1) || 0) : target.topology === 'sentinel' ? target.db : 0
    this.redis = connectRedis(target, {
      ...common,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      autoResubscribe: false,
      commandTimeout: COMMAND_TIMEOUT_MS,
      reconnectOnError: reconnectOnReadonly
    })
    this.blocking = connectRedis(target, { ...common, maxRetriesPerRequest: null })
    this.channels = channelsOf(this.redis, this.own.queue)
    this.#publish = this.channels.publishCommand
    this.follow = new RedisFollow(this.redis, this.channels, guard)
    for (const client of [this.redis, this.blocking]) {
      // reported through availability, in plain words
      client.on('error', (error: Error) => { this.#failed(error) })
      // ioredis gives a connection up for good when a failover's news (+switch-master) reaches its
      // Sentinel connector while it is asking the sentinels where to connect (its connect rejects,
      // the client ends): made again, as any other dropped connection is
      client.on('end', () => {
        if (this.#endured()) setTimeout(() => { if (this.#endured() && client.status === 'end') client.connect().catch(() => {}) }, RECONNECT_ENDED_MS).unref()
      })
    }
    this.redis.on('ready', () => {
      if (this.#refused !== undefined) return
      // a server restarted or failed over knows no script: loaded before the first EVALSHA (a NOSCRIPT still
      // falls back to EVAL); on a cluster, SCRIPT LOAD reaches any node: the app's node loads them on first use
      if (!isCluster(this.redis)) for (const script of [...SCRIPTS, ...QUEUE_SCRIPTS]) script.load(this.redis).catch(() => {})
      this.#setAvailable(true)
      this.#check() // a connection made again may reach a server that no longer serves (a replica now)
    })
    this.redis.on('close', () => { this.#setAvailable(false) })
    // a connection can stay open to a Redis that no longer answers, or that is no primary any more:
    // a command that finds it so has it checked
    suspicions.add(this.#suspect)
  }

  /** Checks now whether the store serves (one at a time). */
  #check (): void {
    if (this.#checking || this.closed) return
    this.#checking = true
    void this.#answers().then(up => {
      this.#checking = false
      this.#setAvailable(up)
    })
  }

  /** Whether the primary answers (within COMMAND_TIMEOUT_MS) as a primary: a replica or a loading server does not serve. */
  async #answers (): Promise<boolean> {
    if (this.redis.status !== 'ready') return false
    try {
      // on a cluster, a write to the app's slot: a node that lost it answers MOVED, a cluster down CLUSTERDOWN
      if (isCluster(this.redis)) return await this.redis.del(this.own.probe) >= 0
      const role = await this.redis.call('ROLE') as unknown[]
      if (role[0] !== 'master' && this.#refused === undefined) this.#problem = 'the server is a replica, not the primary'
      return role[0] === 'master'
    } catch (error) {
      // a server that refuses ROLE (a managed service) still answered
      if ((error as Error).name === 'ReplyError' && unavailableReply(error as ReplyLike) === undefined) return true
      if (this.#refused === undefined) this.#problem = plainWords(error as Error)
      return false
    }
  }

  get available (): boolean { return this.#available === true }

  get listener (): RunStoreListener | undefined { return this.#listener }
  /** Told of the store's availability as soon as it is known: at once when it already is (a Redis down at start). */
  set listener (listener: RunStoreListener | undefined) {
    this.#listener = listener
    if (this.#available !== undefined) listener?.availability(this.#available, this.#available ? undefined : this.#problem)
  }

  /** A connection that ended is made again: unless the store was closed, or refused its database. */
  #endured (): boolean { return !this.closed && this.#refused === undefined }

  /**
   * A client's error: remembered as the outage's reason. A database number the server does not
   * have (its SELECT refused, which ioredis reports and then goes on in database 0) is never
   * replaced by another: both connections are closed for good and the store stays unavailable.
   */
  #failed (error: Error): void {
    if (this.#refused !== undefined) return
    this.#problem = plainWords(error)
    if (!/DB index is out of range/.test(error.message)) return
    this.#refused = `the server has no database ${this.#db}`
    this.#problem = this.#refused
    this.blocking.disconnect()
    this.redis.disconnect()
    this.#setAvailable(false)
  }

  /** How long an Idempotency-Key claim outlives its sidecar's last heartbeat: as long as a lost sidecar's runs. */
  get claimLeaseMs (): number { return this.lostAfterMs + this.heartbeatMs }

  /** Publishes `message` on one of the app's channels, as the topology does (its receivers' count). */
  async publishOn (channel: string, message: string): Promise<number> {
    return await guard(this.#publish === 'SPUBLISH' ? this.redis.spublish(channel, message) : this.redis.publish(channel, message)) as number
  }

  /** Acknowledges and deletes an entry whose run will not run here. */
  async forget (keys: ScopeKeys, entry: string): Promise<void> {
    this.lease.held.delete(entry)
    if (entry === '') return
    await guard(DROP_ENTRY.call(this.redis, { stream: keys.queue, group: GROUP, entry }))
  }

  async read (keys: ScopeKeys, runId: string): Promise<[RunView, string, string]> {
    const [view, raw, entry] = await this.readOrMissing(keys, runId)
    if (view === undefined) throw new RunNotFoundError()
    return [view, raw, entry]
  }

  /** A run's view, its record as stored (for a compare-and-set), its queue entry and the sidecar running it ('' none). */
  async readOrMissing (keys: ScopeKeys, runId: string): Promise<[RunView | undefined, string, string, string]> {
    const [raw, result, async, entry, owner, webhook, sub] = await guard(this.redis.hmget(keys.run(runId), 'record', 'result', 'async', 'entry', 'owner', 'webhook_state', 'sub'))
    if (raw === null || raw === undefined) return [undefined, '', '', '']
    let record = JSON.parse(raw) as RunRecord
    // the webhook's delivery state, kept beside the record (WEBHOOK_STATE): `<status> <attempts>`
    if (webhook !== null && webhook !== undefined) {
      const [status, attempts] = webhook.split(' ') as [WebhookStatus, string]
      record = withWebhook(record, { status, attempts: Number(attempts) })
    }
    return [{ record, resultJson: result ?? undefined, async: async === '1', sub: sub ?? undefined }, raw, entry ?? '', owner ?? '']
  }

  /** Compare-and-set of the record; a finished record gets its TTL, and its followers the end. */
  async transition (keys: ScopeKeys, runId: string, old: string, record: RunRecord, extra: TransitionExtra): Promise<boolean> {
    return await guard(TRANSITION.call(this.redis, this.#transitionFields(keys, runId, old, record, extra)))
  }

  /**
   * As transition, and, when it changed the record, the webhook's delivery written down and held
   * in the same step (END_AND_HOLD; `hold`: HOLD_DELIVERY's fields). The delivery's entry id, or
   * undefined when the record had changed.
   */
  async transitionAndHold (keys: ScopeKeys, runId: string, old: string, record: RunRecord, extra: TransitionExtra,
    hold: FieldsOf<typeof HOLD_DELIVERY>): Promise<string | undefined> {
    const end = TRANSITION.build(this.#transitionFields(keys, runId, old, record, extra))
    const held = HOLD_DELIVERY.build(hold)
    return await guard(END_AND_HOLD.call(this.redis, { transitionKeys: end.keys, holdKeys: held.keys, transitionArgs: end.args, holdArgs: held.args }))
  }

  /**
   * As transition, and, when it changed the record, the next run taken in the same step
   * (END_AND_TAKE; `take`: TAKE's fields): what TAKE answered, or undefined when the record had changed.
   */
  async transitionAndTake (keys: ScopeKeys, runId: string, old: string, record: RunRecord, extra: TransitionExtra,
    take: FieldsOf<typeof TAKE>): Promise<TakeOutcome | undefined> {
    const end = TRANSITION.build(this.#transitionFields(keys, runId, old, record, extra))
    const taking = TAKE.build(take)
    return await guard(END_AND_TAKE.call(this.redis, { transitionKeys: end.keys, takeKeys: taking.keys, transitionArgs: end.args, takeArgs: taking.args }))
  }

  #transitionFields (keys: ScopeKeys, runId: string, old: string, record: RunRecord, extra: TransitionExtra): FieldsOf<typeof TRANSITION> {
    const finished = isFinished(record)
    return {
      run: keys.run(runId), queue: keys.queue, events: keys.events(runId), queuedBytes: keys.queuedBytes, oldRunningSet: keys.running,
      expiry: keys.expiry, turns: keys.turns, index: keys.runs,
      oldRecord: old, newRecord: JSON.stringify(record), result: extra.result ?? '', owner: extra.owner ?? '', entry: extra.entry ?? '',
      ttlSeconds: finished ? this.settings.retentionSeconds : 0, liveChannel: keys.live(runId), message: extra.done === true ? 'done' : '', runId,
      indexCutoffMs: finished ? this.indexCutoff() : ''
    }
  }

  /** The created_at (ms) before which a finished run's index entry may go (redis-run-index.ts). */
  indexCutoff (): number {
    return indexCutoff(this.settings.retentionSeconds, this.settings.queueTtlSeconds ?? DEFAULT_QUEUE_TTL_SECONDS)
  }

  /** Closes the connections. */
  close (): void {
    this.closed = true
    clearInterval(this.#probe)
    suspicions.delete(this.#suspect)
    this.follow.close()
    this.blocking.disconnect()
    this.redis.disconnect()
  }

  #setAvailable (available: boolean): void {
    if (this.#available === available || this.closed) return
    this.#available = available
    if (available) this.groups.clear() // the server may have restarted empty
    // probed until it serves again; not while it does
    clearInterval(this.#probe)
    this.#probe = undefined
    if (!available) {
      this.#probe = setInterval(() => { this.#check() }, PROBE_MS)
      this.#probe.unref()
    }
    this.listener?.availability(available, available ? undefined : this.#problem)
  }
}

/**
 * Any failure to reach Redis becomes the 503 of recorded-run requests, and so does an error reply
 * a deployment gives (see unavailableReply); every other error reply (`ERR` wrong arguments or
 * syntax, `WRONGTYPE`, `NOPERM`, a script's own error) is a bug and passes, to answer 500. No
 * answer within `timeoutMs` of the call (Infinity: a command that waits on purpose, behind a
 * blocking read) is unavailable too.
 */
export async function guard<T> (pending: Promise<T>, timeoutMs = COMMAND_TIMEOUT_MS): Promise<T> {
  try {
    return await (timeoutMs === Infinity ? pending : answerWithin(pending, timeoutMs))
  } catch (error) {
    if (!(error instanceof RunStoreUnavailableError) && (error as Error).name === 'ReplyError' && unavailableReply(error as ReplyLike) === undefined) throw error
    for (const suspect of suspicions) suspect()
    throw error instanceof RunStoreUnavailableError ? error : new RunStoreUnavailableError(plainWords(error as Error))
  }
}

export function scopeOfQueue (queue: string): RunScope {
  const name = queue.slice(queue.indexOf('{') + 1, queue.indexOf('}'))
  const [projectId, appName] = name.split('/') as [string, string]
  return { projectId, appName }
}
