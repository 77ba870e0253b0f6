import type { Socket } from 'node:net'
import type { Pool as UndiciPool, buildConnector } from 'undici'
import { Pool } from '../shared/undici-core.ts'
import type { Cuttable } from './webhook-attempt.ts'

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
export type DestinationPoolOptions = Omit<UndiciPool.Options, 'connect' | 'connections' | 'factory'>

/** One attempt's turn: the pool to send its one request with, and the release (call it once) when undici is done with it. */
export interface DestinationSlot {
  readonly pool: UndiciPool
  readonly release: () => void
}

/** At most `limit` turns taken at once; the rest wait first come, first served, or give up when they are cut. */
class Turns {
  readonly #limit: number
  readonly #queue: Array<{ grant: () => void, settled: boolean }> = []
  #taken = 0
  #waiting = 0

  constructor (limit: number) { this.#limit = limit }

  /** Turns taken or waited for. */
  get busy (): boolean { return this.#taken > 0 || this.#waiting > 0 }

  /** A turn at once, when one is free and nobody waits. */
  tryTake (): boolean {
    if (this.#waiting > 0 || this.#taken >= this.#limit) return false
    this.#taken++
    return true
  }

  /** Waits for a turn; rejects with the cut's reason when `waiter` is cut first. */
  async wait (waiter: Cuttable): Promise<void> {
    if (waiter.isCut) throw waiter.reason
    await new Promise<void>((resolve, reject) => {
      const queued = { grant: resolve, settled: false }
      // called at most once, and never after the grant (which unregisters it)
      waiter.whenCut(() => {
        queued.settled = true
        this.#waiting--
        reject(waiter.reason)
      })
      queued.grant = () => { waiter.whenCut(undefined); resolve() }
      this.#queue.push(queued)
      this.#waiting++
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
  readonly pool: UndiciPool
  readonly turns: Turns
  /** Its open connections. */
  readonly sockets: Set<Socket>
  /** What a turn hands out (the same for every turn: its release gives back one turn). */
  readonly slot: DestinationSlot
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

  /** A turn to send one request to `origin`: at once when one is free, else a wait that rejects with the cut's reason when `attempt` is cut first. */
  acquire (origin: string, attempt: Cuttable): DestinationSlot | Promise<DestinationSlot> {
    const destination = this.#destinations.get(origin) ?? this.#open(origin)
    if (destination.turns.tryTake()) return destination.slot
    return destination.turns.wait(attempt).then(() => destination.slot, (error: unknown) => {
      this.#settle(destination)
      throw error
    })
  }

  /** Destroys every pool and its connections. */
  async close (): Promise<void> {
    const pools = [...this.#destinations.values()].map(async destination => { await destination.pool.destroy() })
    this.#destinations.clear()
    await Promise.all(pools)
  }

  #open (origin: string): Destination {
    const turns = new Turns(CONNECTIONS_PER_DESTINATION)
    const pool = new Pool(origin, {
      ...this.#options,
      connections: CONNECTIONS_PER_DESTINATION,
      connect: (options, callback) => { this.#connectFor(destination, options, callback) }
    })
    const release = (): void => {
      turns.give()
      this.#settle(destination)
    }
    const destination: Destination = { origin, pool, turns, sockets: new Set(), slot: { pool, release } }
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
