import type { Redis } from 'ioredis'
import type { RunEventItem, RunView } from '../../run-data.ts'
import type { Channels } from './redis-channels.ts'

/** Live messages a follower has not pulled yet, at most this many and this many bytes (of data); past it, it reads the kept events instead. */
const PENDING_MAX = 1000
const PENDING_MAX_BYTES = 1024 * 1024
/** Kept events read per XRANGE: at most this many, fewer when they are large (about PAGE_BYTES a page). */
const PAGE = 500
const PAGE_BYTES = 1024 * 1024
/**
 * The first page, before the events' size is known: small, so a page of large events (up to
 * STREAM_MAX_EVENT_BYTES each) stays well within the command timeout; the next pages grow to PAGE.
 */
const FIRST_PAGE = 8

/** A live event: its number, its data, and its name (`retry`: written by RETRY, field `r`; a data event: undefined). */
interface LiveEvent { readonly n: number, readonly data: string, readonly event: 'retry' | undefined }

/** One follower's subscription to a run's live channel. */
export class Listening {
  readonly signal: AbortSignal
  /** Live events not pulled yet, in order. */
  pending: LiveEvent[] = []
  /** The length of their data. */
  pendingBytes = 0
  /** Live messages were dropped (a slow reader, a reconnect): read the kept events. */
  stale = true
  /** The run has ended (its `done` message came). */
  done = false
  #wake: (() => void) | undefined
  readonly stop: () => void

  constructor (signal: AbortSignal, stop: () => void) {
    this.signal = signal
    this.stop = stop
  }

  push (message: string): void {
    if (message === 'done') {
      this.done = true
    } else if (this.pending.length >= PENDING_MAX || this.pendingBytes + message.length > PENDING_MAX_BYTES) {
      this.pending = []
      this.pendingBytes = 0
      this.stale = true
    } else {
      const newline = message.indexOf('\n')
      const data = message.slice(newline + 1)
      const retry = message.startsWith('r')
      this.pending.push({ n: Number(message.slice(retry ? 1 : 0, newline)), data, event: retry ? 'retry' : undefined })
      this.pendingBytes += data.length
    }
    this.wakeUp()
  }

  /** The first live event not pulled yet, taken out. */
  shift (): LiveEvent | undefined {
    const head = this.pending.shift()
    if (head !== undefined) this.pendingBytes -= head.data.length
    return head
  }

  wakeUp (): void {
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }

  /** Resolves at the next message, reconnect or abort. */
  async change (): Promise<void> {
    if (this.signal.aborted) return
    await new Promise<void>(resolve => {
      const done = (): void => {
        this.signal.removeEventListener('abort', done)
        this.#wake = undefined
        resolve()
      }
      this.#wake = done
      this.signal.addEventListener('abort', done, { once: true })
    })
  }
}

/**
 * Run followers over the store's request connection, subscribed to channels as well (RESP3: its
 * messages come as push frames beside the replies): a channel per run carries its events
 * (`<n>\n<data>`; a retry event `r<n>\n<data>`) and its end (`done`); a follower reads the kept events (XRANGE) to start, to
 * catch up after falling behind or a reconnect, and takes live events straight from the messages
 * while it keeps up.
 */
export class RedisFollow {
  readonly #redis: Redis
  readonly #pubsub: Channels
  readonly #guard: <T>(pending: Promise<T>) => Promise<T>
  readonly #channels = new Map<string, Set<(message: string) => void>>()
  readonly #listenings = new Set<Listening>()
  #closed = false

  constructor (redis: Redis, channels: Channels, guard: <T>(pending: Promise<T>) => Promise<T>) {
    this.#redis = redis
    this.#pubsub = channels
    this.#guard = guard
    channels.onMessage((channel, message) => {
      const handlers = this.#channels.get(channel)
      if (handlers !== undefined) for (const handle of handlers) handle(message)
    })
    // messages published while the subscriptions were away are lost: every follower reads the kept events
    channels.onLost(() => {
      for (const listening of this.#listenings) {
        listening.stale = true
        listening.wakeUp()
      }
    })
  }

  /** Calls `handle` for every message on `channel` until close. */
  onMessage (channel: string, handle: (message: string) => void): void {
    void this.#subscribe(channel, handle).catch(() => {})
  }

  /** Subscribes a follower to `channel` until `signal` aborts or it stops. */
  async listen (channel: string, signal: AbortSignal): Promise<Listening> {
    const handle = (message: string): void => { listening.push(message) }
    const listening: Listening = new Listening(signal, () => {
      signal.removeEventListener('abort', listening.stop)
      this.#listenings.delete(listening)
      this.#unsubscribe(channel, handle)
    })
    this.#listenings.add(listening)
    signal.addEventListener('abort', listening.stop, { once: true })
    try {
      await this.#guard(this.#subscribe(channel, handle))
    } catch (error) {
      listening.stop()
      throw error
    }
    return listening
  }

  /** The number of the last event kept (-1: none). */
  async lastEvent (eventsKey: string): Promise<number> {
    const last = await this.#guard(this.#redis.xrevrange(eventsKey, '+', '-', 'COUNT', 1))
    return last.length === 0 ? -1 : eventNumber((last[0] as [string, string[]])[0])
  }

  /** The events from `from` on, then live ones, then `done` (`finished` says when the run has ended). */
  async * events (listening: Listening, eventsKey: string, from: number, finished: () => Promise<RunView | undefined>): AsyncGenerator<RunEventItem> {
    let next = from
    let page = FIRST_PAGE
    try {
      while (!listening.signal.aborted && !this.#closed) {
        const pending = listening.pending
        while (pending.length > 0 && (pending[0] as { n: number }).n < next) listening.shift()
        const head = pending[0]
        if (!listening.stale && head !== undefined && head.n === next) {
          listening.shift()
          yield eventItem(next++, head.data, head.event)
          continue
        }
        if (listening.stale || listening.done || (head !== undefined && head.n > next)) {
          const entries = await this.#guard(this.#redis.xrange(eventsKey, `0-${next + 1}`, '+', 'COUNT', page))
          if (entries.length > 0) {
            const first = eventNumber((entries[0] as [string, string[]])[0])
            if (first > next) yield { type: 'gap', first }
            let bytes = 0
            for (const [, fields] of entries) bytes += (fields[1] as string).length
            // a page is held until its reader has taken all of it: the next is sized to about PAGE_BYTES
            page = Math.max(1, Math.min(PAGE, Math.floor(entries.length * PAGE_BYTES / Math.max(bytes, 1))))
            for (const [id, fields] of entries) {
              const n = eventNumber(id)
              yield eventItem(n, fields[1] as string, fields[0] === 'r' ? 'retry' : undefined)
              next = n + 1
            }
            continue
          }
          listening.stale = false
          // `done` heard before this read was sent: the read sees the end (it left after it)
          const doneBefore = listening.done
          const view = await finished()
          if (view !== undefined) {
            yield { type: 'done', view }
            return
          }
          if (doneBefore) return // the run is gone (expired) after it ended
          continue // messages may have come during the reads
        }
        await listening.change()
      }
    } finally {
      listening.stop()
    }
  }

  close (): void {
    this.#closed = true
    for (const listening of this.#listenings) listening.wakeUp()
  }

  async #subscribe (channel: string, handle: (message: string) => void): Promise<void> {
    let handlers = this.#channels.get(channel)
    if (handlers === undefined) {
      handlers = new Set()
      this.#channels.set(channel, handlers)
      handlers.add(handle)
      await this.#pubsub.subscribe(channel)
    } else {
      handlers.add(handle)
    }
  }

  #unsubscribe (channel: string, handle: (message: string) => void): void {
    const handlers = this.#channels.get(channel)
    if (handlers === undefined) return
    handlers.delete(handle)
    if (handlers.size > 0) return
    this.#channels.delete(channel)
    if (!this.#closed) this.#pubsub.unsubscribe(channel)
  }
}

/** An event as a reader gets it: a data event (field `d`), or a retry event (field `r`). */
const eventItem = (n: number, data: string, event: 'retry' | undefined): RunEventItem =>
  event === undefined ? { type: 'event', n, data } : { type: 'event', n, data, event }

/** Event n is kept under the entry id `0-<n+1>`. */
const eventNumber = (id: string): number => Number(id.slice(id.indexOf('-') + 1)) - 1
