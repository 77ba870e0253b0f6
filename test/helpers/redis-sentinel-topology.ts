import type { TestLike } from './redis-server.ts'
import { ask, clientCount, fieldsOf, infoField, nodeAt, type RedisNode, topologyWorkspace, waitFor } from './redis-topology-processes.ts'

export interface SentinelRedisOptions {
  /** The monitored master's name, the URL's path. Default `fleet`. */
  masterName?: string
  /** `sentinel down-after-milliseconds`. Default 1000. */
  downAfterMs?: number
  /** `sentinel failover-timeout`. Default 5000. */
  failoverTimeoutMs?: number
}

/** A primary, one replica and three sentinels (quorum 2), each a redis-server on a free loopback port. */
export interface SentinelRedis {
  /** `redis+sentinel://127.0.0.1:<s1>,127.0.0.1:<s2>,127.0.0.1:<s3>/<masterName>`. */
  readonly url: string
  readonly masterName: string
  /** The sentinels, for ioredis' `new Redis({ sentinels, name })`. */
  readonly sentinels: ReadonlyArray<{ host: string, port: number }>
  /** The two data nodes' urls, `redis://127.0.0.1:<port>/0`, the first one the primary at start. */
  readonly nodes: readonly string[]
  /** The port of every process: the data nodes, then the sentinels. */
  readonly ports: readonly number[]
  /** The temp directory of all the processes' files, removed at teardown. */
  readonly dir: string
  /** `redis://127.0.0.1:<port>/0` of the primary the first sentinel that answers names. */
  primaryUrl: () => Promise<string>
  /** The other data node's url. */
  replicaUrl: () => Promise<string>
  /**
   * Waits (≤ 30 s) until the topology is whole: the primary answers ROLE master, the replica's
   * link to it is up and the primary streams to it (the replica acknowledged its sync), every sentinel names the primary (flags `master`), knows the replica (flags
   * `slave`: not down; its last INFO of it says slave of the primary) and the two other sentinels. Throws at once when a data node is down (after failover(), before restartOld()).
   */
  ready: () => Promise<void>
  /**
   * ready(), then SIGKILLs the primary and waits (≤ 30 s) until every sentinel names the replica
   * as master and it answers ROLE master. Resolves with the new primary's url.
   */
  failover: () => Promise<string>
  /**
   * Starts the node failover() killed again, empty, and resolves when ready(). As a master by
   * default (a crashed primary back with its old configuration), which the sentinels demote (≈ 20 s);
   * `asReplica`: with REPLICAOF the new primary (as an orchestrator would start it), ready in ≈ 1 s.
   */
  restartOld: (options?: { asReplica?: boolean }) => Promise<void>
  /**
   * ready(), then SENTINEL FAILOVER (nothing killed), and waits (≤ 30 s) for the switch as
   * failover() does. The old primary still answers as a master until the sentinels demote it,
   * ≈ 10 s later (a client that is not told keeps writing there); ready() waits for that.
   */
  sentinelFailover: () => Promise<string>
  /**
   * SIGSTOPs sentinel `index` (a paused host: its connections stay open, it answers nothing) until
   * the returned function SIGCONTs it; meanwhile the topology's own checks skip it.
   */
  pauseSentinel: (index: number) => () => void
  /** Per running process (data nodes and sentinels, keyed by url), the connections whose name starts with `namePrefix`. */
  clientCount: (namePrefix: string) => Promise<Record<string, number>>
}

/** Starts the topology and waits until ready(); every process is killed at teardown. Undefined when there is no redis-server (see topologyWorkspace). */
export async function startSentinelRedis (t: TestLike, options: SentinelRedisOptions = {}): Promise<SentinelRedis | undefined> {
  const { masterName = 'fleet', downAfterMs = 1000, failoverTimeoutMs = 5000 } = options
  const workspace = await topologyWorkspace(t, 'Sentinel topology')
  if (workspace === undefined) return undefined
  const first = await workspace.dataNode('node-1', () => [])
  const second = await workspace.dataNode('node-2', () => [])
  const data = [first, second]
  await first.start()
  await second.start(['--replicaof', '127.0.0.1', String(first.port)])
  const sentinels: RedisNode[] = []
  for (const name of ['sentinel-1', 'sentinel-2', 'sentinel-3']) {
    sentinels.push(await workspace.sentinel(name, [
      'sentinel resolve-hostnames no',
      'sentinel announce-ip 127.0.0.1',
      `sentinel monitor ${masterName} 127.0.0.1 ${first.port} 2`,
      `sentinel down-after-milliseconds ${masterName} ${downAfterMs}`,
      `sentinel failover-timeout ${masterName} ${failoverTimeoutMs}`,
      `sentinel parallel-syncs ${masterName} 1`
    ]))
  }
  await Promise.all(sentinels.map(async sentinel => { await sentinel.start() }))
  const everything = [...data, ...sentinels]
  /** Sentinels pauseSentinel() stopped: the checks below do not ask them. */
  const paused = new Set<RedisNode>()
  const answering = (): RedisNode[] => sentinels.filter(sentinel => !paused.has(sentinel))

  /** The primary's port as the first sentinel that answers names it. */
  const primaryPort = async (): Promise<number> => {
    let last: unknown
    for (const sentinel of answering().filter(sentinel => sentinel.running)) {
      try {
        const [, port] = await ask(sentinel.port, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName]) as [string, string]
        return Number(port)
      } catch (error) { last = error }
    }
    throw new Error(`no sentinel names the primary: ${(last as Error | undefined)?.message}`)
  }
  const other = (port: number): RedisNode => data.find(node => node.port !== port) as RedisNode

  /** True when `node` answers ROLE master and every sentinel names it, else what was seen. */
  const switchedTo = async (node: RedisNode): Promise<true | string> => {
    const [role] = await ask(node.port, ['ROLE']) as [string]
    if (role !== 'master') return `${node.url} says ROLE ${role}`
    for (const sentinel of answering()) {
      const [, port] = await ask(sentinel.port, ['SENTINEL', 'GET-MASTER-ADDR-BY-NAME', masterName]) as [string, string]
      if (Number(port) !== node.port) return `sentinel ${sentinel.port} names ${port}`
    }
    return true
  }

  /** True when the topology is whole (see ready()), else what is missing. */
  const whole = async (): Promise<true | string> => {
    const primary = nodeAt(data, `redis://127.0.0.1:${await primaryPort()}`)
    const replica = other(primary.port)
    const [role] = await ask(primary.port, ['ROLE']) as [string]
    if (role !== 'master') return `primary ${primary.port} says ROLE ${role}`
    const replication = await ask(replica.port, ['INFO', 'replication'])
    if (infoField(replication, 'master_port') !== String(primary.port) || infoField(replication, 'master_link_status') !== 'up') {
      return `replica ${replica.port}: role ${infoField(replication, 'role')}, master_port ${infoField(replication, 'master_port')}, link ${infoField(replication, 'master_link_status')}`
    }
    // after a full sync the primary streams writes to the replica only once the replica's first
    // REPLCONF ACK arrives (up to 1 s later): until then its acknowledged offset is 0, and a
    // failover then would lose every write since the sync
    const streaming = /^slave0:.*state=online,offset=([0-9]+)/m.exec(String(await ask(primary.port, ['INFO', 'replication'])))
    if (streaming === null || streaming[1] === '0') return `primary ${primary.port} does not stream to its replica yet (no REPLCONF ACK since the sync)`
    for (const sentinel of answering()) {
      const master = fieldsOf(await ask(sentinel.port, ['SENTINEL', 'MASTER', masterName]))
      if (master.port !== String(primary.port) || master.flags !== 'master') return `sentinel ${sentinel.port}: master ${master.port} flags ${master.flags}`
      const replicas = (await ask(sentinel.port, ['SENTINEL', 'REPLICAS', masterName]) as unknown[]).map(fieldsOf)
      // a sentinel whose last INFO of the replica says master would demote it again if promoted
      const seen = replicas.map(entry => `${entry.port} ${entry.flags} reporting ${entry['role-reported']} of ${entry['master-port']}`).join('; ')
      if (replicas.length !== 1 || seen !== `${replica.port} slave reporting slave of ${primary.port}`) return `sentinel ${sentinel.port} sees replicas: ${seen}`
      const others = await ask(sentinel.port, ['SENTINEL', 'SENTINELS', masterName]) as unknown[]
      if (others.length !== 2) return `sentinel ${sentinel.port} knows ${others.length} other sentinels`
    }
    return true
  }

  let killed: RedisNode | undefined
  const ready = async (): Promise<void> => {
    const down = data.find(node => !node.running)
    if (down !== undefined) throw new Error(`data node ${down.url} is down: restartOld() first`)
    await waitFor('the Sentinel topology to be ready', whole)
  }
  const switchFrom = async (old: number): Promise<string> => {
    const next = other(old)
    try {
      await waitFor(`the sentinels to promote ${next.url}`, async () => await switchedTo(next))
    } catch (error) {
      const logs = sentinels.map(sentinel => `sentinel ${sentinel.port}:\n${sentinel.log().slice(-1500)}`)
      throw new Error([(error as Error).message, ...logs].join('\n'))
    }
    return next.url
  }

  await ready()
  return {
    url: `redis+sentinel://${sentinels.map(sentinel => `127.0.0.1:${sentinel.port}`).join(',')}/${masterName}`,
    masterName,
    sentinels: sentinels.map(sentinel => ({ host: '127.0.0.1', port: sentinel.port })),
    nodes: data.map(node => node.url),
    ports: everything.map(node => node.port),
    dir: workspace.dir,
    primaryUrl: async () => `redis://127.0.0.1:${await primaryPort()}/0`,
    replicaUrl: async () => other(await primaryPort()).url,
    ready,
    failover: async () => {
      await ready()
      const old = await primaryPort()
      killed = nodeAt(data, `redis://127.0.0.1:${old}`)
      await killed.kill()
      return await switchFrom(old)
    },
    restartOld: async ({ asReplica = false } = {}) => {
      if (killed === undefined) throw new Error('restartOld(): failover() killed no node')
      await killed.start(asReplica ? ['--replicaof', '127.0.0.1', String(other(killed.port).port)] : [])
      killed = undefined
      await ready()
    },
    sentinelFailover: async () => {
      await ready()
      const old = await primaryPort()
      await ask(sentinels[0]?.port as number, ['SENTINEL', 'FAILOVER', masterName])
      return await switchFrom(old)
    },
    pauseSentinel: index => {
      const sentinel = sentinels[index] as RedisNode
      paused.add(sentinel)
      sentinel.signal('SIGSTOP')
      return () => {
        sentinel.signal('SIGCONT')
        paused.delete(sentinel)
      }
    },
    clientCount: async namePrefix => await clientCount(everything.filter(node => !paused.has(node)), namePrefix)
  }
}
