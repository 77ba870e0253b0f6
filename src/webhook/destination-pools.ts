import type { Socket } from 'node:net'
import { Pool, type buildConnector } from 'undici'

/**
 * Most connections (and attempts in flight) to one destination origin. Without a bound, a flood of
 * webhooks to a receiver that never answers held a socket per pending delivery (15k sockets, 16k
 * fds, +450 MB); 32 keep a busy receiver fed while the rest wait their turn within their time limit.
 */
export const CONNECTIONS_PER_DESTINATION = 32

/** A connection undici asked for while no attempt to its origin was in flight or waiting. */
class SpareConnectionError extends Error {
  readonly code = 'WEBHOOK_SPARE_CONNECTION'
  constructor (origin: string) { super(`no attempt needs a connection to ${origin}`) }
}

/** The pool options every destination gets (the connector and the bound are set here). */
export type DestinationPoolOptions = Omit<Pool.Options, 'connect' | 'connections' | 'factory'>

/** One attempt's turn: the pool to send its one request with, and the release (call it once) when undici is done with it. */
export interface DestinationSlot {
  readonly pool: Pool
  readonly release: () => void
}

/** At most `limit` turns taken at once; the rest wait first come, first served, or give up when their signal aborts. */
class Turns {
  readonly #limit: number
  readonly #queue: Array<{ grant: () => void, settled: boolean }> = []
  #taken = 0
  #waiting = 0

  constructor (limit: number) { this.#limit = limit }

  /** Turns taken or waited for. */
  get busy (): boolean { return this.#taken > 0 || this.#waiting > 0 }

  async take (signal: AbortSignal): Promise<void> {
    if (signal.aborted) throw signal.reason
    if (this.#waiting === 0 && this.#taken < this.#limit) { this.#taken++; return }
    await new Promise<void>((resolve, reject) => {
      const waiter = { grant: resolve, settled: false }
      // called at most once, and never after the grant (which removes it)
      const giveUp = (): void => {
        waiter.settled = true
        this.#waiting--
        reject(signal.reason)
      }
      waiter.grant = () => { signal.removeEventListener('abort', giveUp); resolve() }
      this.#queue.push(waiter)
      this.#waiting++
      signal.addEventListener('abort', giveUp, { once: true })
    })
  }

  give (): void {
    this.#taken--
    while (this.#taken < this.#limit && this.#queue.length > 0) {
      const waiter = this.#queue.shift() as { grant: () => void, settled: boolean }
      if (waiter.settled) continue
      waiter.settled = true
      this.#waiting--
      this.#taken++
      waiter.grant()
    }
  }
}

interface Destination {
  readonly origin: string
  readonly pool: Pool
  readonly turns: Turns
  /** Its open connections. */
  readonly sockets: Set<Socket>
}

/**
 * One undici pool per destination origin, of at most CONNECTIONS_PER_DESTINATION connections, with
 * at most as many attempts handed to it at once, the rest waiting in order; and no connection kept
 * that never carried a request once nothing to that origin is in flight. Ours to do, not undici's
 * Agent: a request aborted in undici's queue settles only when a connection takes it
 * (nodejs/undici#386); a request aborted in flight is put back as pending, so its client
 * reconnects for it and keeps the fresh socket idle (nodejs/undici#5845); and the Agent replaces
 * a pool whose connections all closed at once while the old one still reconnects, so the bound
 * would not hold across the two. A destination lives while it is busy or has connections open.
 */
export class DestinationPools {
  readonly #destinations = new Map<string, Destination>()
  readonly #connect: buildConnector.connector
  readonly #options: DestinationPoolOptions

  constructor (connect: buildConnector.connector, options: DestinationPoolOptions) {
    this.#connect = connect
    this.#options = options
  }

  /** Waits for a turn to send one request to `origin`; rejects with the signal's reason when it aborts first. */
  async acquire (origin: string, signal: AbortSignal): Promise<DestinationSlot> {
    const destination = this.#destinations.get(origin) ?? this.#open(origin)
    try {
      await destination.turns.take(signal)
    } catch (error) {
      this.#settle(destination)
      throw error
    }
    return {
      pool: destination.pool,
      release: () => {
        destination.turns.give()
        this.#settle(destination)
      }
    }
  }

  /** Destroys every pool and its connections. */
  async close (): Promise<void> {
    const pools = [...this.#destinations.values()].map(async destination => { await destination.pool.destroy() })
    this.#destinations.clear()
    await Promise.all(pools)
  }

  #open (origin: string): Destination {
    const destination: Destination = {
      origin,
      turns: new Turns(CONNECTIONS_PER_DESTINATION),
      sockets: new Set(),
      pool: new Pool(origin, {
        ...this.#options,
        connections: CONNECTIONS_PER_DESTINATION,
        connect: (options, callback) => { this.#connectFor(destination, options, callback) }
      })
    }
    this.#destinations.set(origin, destination)
    return destination
  }

  /** Opens a connection only while an attempt to the destination is in flight or waiting (a reconnect for an aborted request fails, and undici drops that request). */
  #connectFor (destination: Destination, options: buildConnector.Options, callback: buildConnector.Callback): void {
    if (!this.#busy(destination)) { callback(new SpareConnectionError(destination.origin), null); return }
    this.#connect(options, (...result: Parameters<buildConnector.Callback>) => {
      const [error, socket] = result
      if (error !== null) { callback(error, null); return }
      if (!this.#busy(destination)) {
        socket.destroy()
        callback(new SpareConnectionError(destination.origin), null)
        return
      }
      destination.sockets.add(socket)
      socket.once('close', () => {
        destination.sockets.delete(socket)
        this.#settle(destination)
      })
      callback(null, socket)
    })
  }

  #busy (destination: Destination): boolean {
    return this.#destinations.get(destination.origin) === destination && destination.turns.busy
  }

  /** Once nothing to the destination is in flight: closes its connections that never carried a request, and forgets it when none are left. */
  #settle (destination: Destination): void {
    if (this.#busy(destination) || this.#destinations.get(destination.origin) !== destination) return
    for (const socket of destination.sockets) {
      if (socket.bytesWritten === 0) socket.destroy()
    }
    if (destination.sockets.size > 0) return
    this.#destinations.delete(destination.origin)
    destination.pool.destroy().catch(() => {})
  }
}
