import type { Redis } from 'ioredis'
import { isCluster, keySlot, type RedisClient } from './redis-connect.ts'

/**
 * The pub/sub channels the store listens to (an app's cancels, a followed run's events), on its
 * request connection (RESP3 carries messages as push frames beside the replies): no connection of
 * their own. `lost` runs after the subscriptions were made again on a new connection: messages
 * published meanwhile are gone.
 */
export interface Channels {
  subscribe: (channel: string) => Promise<void>
  unsubscribe: (channel: string) => void
  readonly publishCommand: 'PUBLISH' | 'SPUBLISH'
  onMessage: (handle: (channel: string, message: string) => void) => void
  onLost: (handle: () => void) => void
}

/** The channels of `client`'s topology: plain pub/sub on one server (Redis 6.2 has no other), sharded pub/sub on a cluster. */
export function channelsOf (client: RedisClient, slotKey: string): Channels {
  return isCluster(client) ? new ClusterChannels(client, slotKey) : new ServerChannels(client)
}

/** One server (alone or the primary Sentinel names): SUBSCRIBE on the request connection, again after each reconnect. */
class ServerChannels implements Channels {
  readonly publishCommand = 'PUBLISH'
  readonly #redis: Redis
  readonly #channels = new Set<string>()
  readonly #lost: Array<() => void> = []

  constructor (redis: Redis) {
    this.#redis = redis
    redis.on('ready', () => {
      if (this.#channels.size > 0) void redis.subscribe(...this.#channels).catch(() => {})
      for (const handle of this.#lost) handle()
    })
  }

  async subscribe (channel: string): Promise<void> {
    this.#channels.add(channel)
    await this.#redis.subscribe(channel)
  }

  unsubscribe (channel: string): void {
    this.#channels.delete(channel)
    void this.#redis.unsubscribe(channel).catch(() => {})
  }

  onMessage (handle: (channel: string, message: string) => void): void { this.#redis.on('message', handle) }
  onLost (handle: () => void): void { this.#lost.push(handle) }
}

/** A node of a cluster client, as ioredis keeps it. */
type Node = Redis

/**
 * A cluster: every channel of the app hashes to its keys' slot, so SSUBSCRIBE goes on the request
 * connection of the node serving that slot (not on a subscriber connection of its own, which would
 * make three per node). When the slot moves (a failover, a resharding) or that connection is made
 * again, the channels are subscribed on the slot's node again.
 */
class ClusterChannels implements Channels {
  readonly publishCommand = 'SPUBLISH'
  readonly #cluster: IoCluster
  readonly #slotKey: string
  readonly #slot: number
  readonly #channels = new Set<string>()
  readonly #lost: Array<() => void> = []
  readonly #messages: Array<(channel: string, message: string) => void> = []
  readonly #heard = new WeakSet<Node>()
  #node: Node | undefined

  constructor (client: RedisClient, slotKey: string) {
    this.#cluster = client as unknown as IoCluster
    this.#slotKey = slotKey
    this.#slot = keySlot(slotKey)
    // slots are read again on a MOVED, a lost node and every few seconds: the slot's node may have changed
    this.#cluster.on('refresh', () => { this.#follow() })
    this.#cluster.on('ready', () => { this.#follow() })
  }

  async subscribe (channel: string): Promise<void> {
    this.#channels.add(channel)
    const node = await this.#nodeOfSlot()
    if (node !== this.#node) {
      this.#follow()
      return
    }
    await node.ssubscribe(channel)
  }

  unsubscribe (channel: string): void {
    this.#channels.delete(channel)
    void this.#node?.sunsubscribe(channel).catch(() => {})
  }

  onMessage (handle: (channel: string, message: string) => void): void { this.#messages.push(handle) }
  onLost (handle: () => void): void { this.#lost.push(handle) }

  /** The node serving the app's slot now (a keyed command first, so the client knows the slots). */
  async #nodeOfSlot (): Promise<Node> {
    let node = this.#currentNode()
    if (node === undefined) {
      await this.#cluster.exists(this.#slotKey)
      node = this.#currentNode()
    }
    if (node === undefined) throw new Error('no node serves the run store\'s slot')
    return node
  }

  #currentNode (): Node | undefined {
    const slot = this.#cluster.slots[this.#slot]
    const key = slot?.[0]
    return key === undefined ? undefined : this.#cluster.connectionPool.getInstanceByKey(key)
  }

  /** Subscribes the channels on the slot's node when it changed; the followers are told messages may be lost. */
  #follow (): void {
    const node = this.#currentNode()
    if (node === undefined || node === this.#node) return
    const old = this.#node
    this.#node = node
    if (old !== undefined && this.#channels.size > 0) void old.sunsubscribe(...this.#channels).catch(() => {})
    if (!this.#heard.has(node)) {
      this.#heard.add(node)
      node.on('smessage', (channel: string, message: string) => {
        if (node !== this.#node) return
        for (const handle of this.#messages) handle(channel, message)
      })
      // the node's own connection made again (clusterNodeRetryStrategy): its subscriptions are gone
      node.on('ready', () => {
        if (node !== this.#node) return
        if (this.#channels.size > 0) void node.ssubscribe(...this.#channels).catch(() => {})
        for (const handle of this.#lost) handle()
      })
    }
    if (this.#channels.size > 0) void node.ssubscribe(...this.#channels).catch(() => {})
    for (const handle of this.#lost) handle()
  }
}

/** What of ioredis's Cluster this file reads: its slot table and node connections (public in its JS, not all in its types). */
interface IoCluster {
  readonly slots: Array<string[] | undefined>
  readonly connectionPool: { getInstanceByKey: (key: string) => Node | undefined }
  on: (event: string, handle: () => void) => unknown
  exists: (key: string) => Promise<number>
}
