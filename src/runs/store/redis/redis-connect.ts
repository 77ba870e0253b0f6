import { isIP } from 'node:net'
import type * as IoRedis from 'ioredis'
import type { ClusterOptions, Redis, RedisOptions } from 'ioredis'
import { parseRunStoreAddress, type RunStoreAddress } from '../../../config/run-store-address.ts'
import { requireCjs } from '../../../shared/require-cjs.ts'

const ioredis = requireCjs('ioredis') as typeof IoRedis

/**
 * A connection to the run store's Redis whatever its topology. A Cluster client is used through
 * the same commands as a single server (ioredis gives both one interface; every command and script
 * here touches one app's keys, one hash slot): it is typed as one, `isCluster` tells them apart.
 */
/** Redis Cluster's hash slot of a key (the package ioredis uses itself). */
export const keySlot = requireCjs('cluster-key-slot') as (key: string) => number

export type RedisClient = Redis

/** RUN_STORE_URL's value: parsed already by the config, or a URL (tests). */
export function runStoreAddress (address: RunStoreAddress | string): RunStoreAddress {
  return typeof address === 'string' ? parseRunStoreAddress('RUN_STORE_URL', address) : address
}

/**
 * A client of the address's topology with `options`: one server as named; with Sentinel, the
 * primary the sentinels name, asked again after a failover (ioredis's failover detector listens to
 * them) or when a connection finds a replica; with Cluster, the node serving each key's slot,
 * following MOVED and ASK (ioredis's cluster client), `options` applying to each node's connection.
 */
export function connectRedis (address: RunStoreAddress, options: RedisOptions): RedisClient {
  if (address.topology === 'single') return new ioredis.Redis(address.url.href, options)
  const tls = address.tls ? { tls: {} } : {}
  const { username, password } = address.credentials
  if (address.topology === 'sentinel') {
    const client = new ioredis.Redis({
      ...options,
      ...tls,
      sentinels: address.sentinels.map(({ host, port }) => ({ host, port })),
      name: address.master,
      db: address.db,
      username,
      password,
      // sentinels are asked with the same credentials when they are set for them too (a common deployment)
      sentinelUsername: username,
      sentinelPassword: password,
      ...(address.tls ? { enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
      failoverDetector: true,
      sentinelRetryStrategy: times => Math.min(100 * times, 1000),
      // a sentinel that takes a connection and answers nothing (a paused host) is given up after
      // 1 s for the next one: without it, a reconnect waits on it for as long as it is paused
      sentinelCommandTimeout: SENTINEL_TIMEOUT_MS
    })
    client.on('ready', () => {
      // at once, then as the sentinels that had not heard of a failover hear of it (hello messages every 2 s)
      for (const ms of QUORUM_CHECKS_MS) setTimeout(() => { void checkQuorum(client, address) }, ms).unref()
    })
    return client
  }
  const { retryStrategy, enableOfflineQueue, ...nodeOptions } = options
  const cluster: ClusterOptions = {
    redisOptions: { ...nodeOptions, ...tls, username, password },
    enableOfflineQueue: enableOfflineQueue ?? true,
    clusterRetryStrategy: (times: number) => retryStrategy?.(times) ?? Math.min(100 * times, 1000),
    // a node's connection that drops is made again (its slot may not have moved: a restart)
    clusterNodeRetryStrategy: (times: number) => Math.min(100 * times, 1000),
    slotsRefreshTimeout: 1000,
    retryDelayOnMoved: 50,
    maxRedirections: 8
  }
  return new ioredis.Cluster(address.nodes.map(({ host, port }) => ({ host, port })), cluster) as unknown as RedisClient
}

/** Whether `client` speaks to a cluster (sharded pub/sub, per-node script caches). */
export function isCluster (client: RedisClient): boolean {
  return (client as { isCluster?: boolean }).isCluster === true
}

/** How long a sentinel is given to name the primary before the next one is asked. */
const SENTINEL_TIMEOUT_MS = 1000

/** When, after a connection is made, the sentinels are asked whether it reached the primary they name. */
const QUORUM_CHECKS_MS = [0, 1000, 3000, 7000]

/**
 * Right after a failover the sentinel asked first may not know it yet and name the old primary,
 * which still takes writes until the others demote it (writes then lost): after a connection is
 * made, the sentinels are asked (QUORUM_CHECKS_MS), and when most of those that answer name
 * another primary the connection is made again (asking them again). A majority, so that one
 * sentinel out of date or misconfigured never keeps the sidecar reconnecting.
 */
async function checkQuorum (client: RedisClient, address: Extract<RunStoreAddress, { topology: 'sentinel' }>): Promise<void> {
  const here = client.stream as { remoteAddress?: string, remotePort?: number } | undefined
  if (here?.remotePort === undefined) return
  const named = await Promise.all(address.sentinels.map(async ({ host, port }) => {
    const sentinel = new ioredis.Redis({
      host, port, username: address.credentials.username, password: address.credentials.password, ...(address.tls ? { tls: {} } : {}),
      lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 1000, commandTimeout: 1000, enableOfflineQueue: true
    })
    sentinel.on('error', () => {})
    try {
      const [ip, at] = await sentinel.call('SENTINEL', 'get-master-addr-by-name', address.master) as [string, string]
      return `${ip}:${at}`
    } catch {
      return undefined
    } finally {
      sentinel.disconnect()
    }
  }))
  const answers = named.filter((name): name is string => name !== undefined)
  const ip = here.remoteAddress?.replace(/^::ffff:/, '') ?? ''
  // a sentinel names the primary by address (or by hostname, announce-hostnames: then only its port can be told apart)
  const elsewhere = answers.filter(name => {
    const colon = name.lastIndexOf(':')
    const host = name.slice(0, colon)
    return Number(name.slice(colon + 1)) !== here.remotePort || (isIP(host) !== 0 && host !== ip)
  })
  if (elsewhere.length * 2 > answers.length && client.status === 'ready' && client.stream === here) client.disconnect(true)
}
