import { freePort } from './ports.ts'
import type { TestLike } from './redis-server.ts'
import { ask, clientCount, infoField, nodeAt, type RedisNode, topologyWorkspace, waitFor } from './redis-topology-processes.ts'

const SLOTS = 16384

export interface RedisClusterOptions {
  /** How many masters share the slots. Default 3. */
  masters?: number
  /** A replica for each master. Default false. */
  replicas?: boolean
  /**
   * `cluster-node-timeout`. Default 15000: no test here fails a node, and on a loaded machine a
   * shorter one lets a node starved of CPU for a second be flagged as failed (the cluster down).
   */
  nodeTimeoutMs?: number
}

/** A Redis Cluster of redis-servers on free loopback ports, the slots split evenly over the masters. */
export interface RedisCluster {
  /** `redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>` (the masters). */
  readonly url: string
  /** The masters' urls, `redis://127.0.0.1:<port>/0`. */
  readonly nodes: readonly string[]
  /** The replicas' urls (empty unless `replicas`), the i-th one replicating the i-th master. */
  readonly replicaNodes: readonly string[]
  /** The port of every process (not the cluster bus ports). */
  readonly ports: readonly number[]
  /** The temp directory of all the processes' files, removed at teardown. */
  readonly dir: string
  /** CLUSTER KEYSLOT `key`. */
  slotOf: (key: string) => Promise<number>
  /** The url of the master serving `key`'s slot (CLUSTER SLOTS of the first master). */
  nodeFor: (key: string) => Promise<string>
  /**
   * Moves `slot` and its keys to the master `toNode` (a url of `nodes`): SETSLOT IMPORTING and
   * MIGRATING, MIGRATE of every key, then SETSLOT NODE on the target, the source and the other
   * masters; waits (≤ 30 s) until every node's CLUSTER SLOTS agrees. `midway` runs after the keys
   * moved and before SETSLOT NODE: the source then answers ASK for them.
   */
  migrateSlot: (slot: number, toNode: string, options?: { midway?: () => Promise<void> }) => Promise<void>
  /** Per running node (keyed by url), the connections whose CLIENT LIST name starts with `namePrefix`. */
  clientCount: (namePrefix: string) => Promise<Record<string, number>>
}

/**
 * Starts the nodes, gives each master its slots, meets them, waits until every node says
 * cluster_state:ok and all CLUSTER SLOTS agree; every process is killed at teardown. Undefined when
 * there is no redis-server (see topologyWorkspace).
 */
export async function startRedisCluster (t: TestLike, options: RedisClusterOptions = {}): Promise<RedisCluster | undefined> {
  const { masters: count = 3, replicas: withReplicas = false, nodeTimeoutMs = 15_000 } = options
  const workspace = await topologyWorkspace(t, 'Redis Cluster')
  if (workspace === undefined) return undefined
  const bus = new Map<RedisNode, number>()
  const clusterNode = async (name: string): Promise<RedisNode> => {
    // the bus port is a free port of its own: <port> + 10000 may be past 65535
    const busPort = await freePort()
    const node = await workspace.dataNode(name, () => [
      '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', String(nodeTimeoutMs),
      '--cluster-port', String(busPort), '--cluster-announce-ip', '127.0.0.1', '--cluster-require-full-coverage', 'yes'
    ])
    bus.set(node, busPort)
    return node
  }
  const masters: RedisNode[] = []
  for (let i = 1; i <= count; i++) masters.push(await clusterNode(`master-${i}`))
  const replicas: RedisNode[] = []
  if (withReplicas) for (let i = 1; i <= count; i++) replicas.push(await clusterNode(`replica-${i}`))
  const all = [...masters, ...replicas]
  await Promise.all(all.map(async node => { await node.start() }))

  const ids = new Map<RedisNode, string>()
  for (const node of all) ids.set(node, String(await ask(node.port, ['CLUSTER', 'MYID'])))
  const per = Math.ceil(SLOTS / count)
  for (const [i, node] of masters.entries()) {
    await ask(node.port, ['CLUSTER', 'SET-CONFIG-EPOCH', i + 1])
    await ask(node.port, ['CLUSTER', 'ADDSLOTSRANGE', i * per, Math.min(SLOTS, (i + 1) * per) - 1])
  }
  const [seed] = masters as [RedisNode]
  for (const node of all.slice(1)) await ask(seed.port, ['CLUSTER', 'MEET', '127.0.0.1', node.port, bus.get(node) as number])
  for (const [i, replica] of replicas.entries()) {
    const master = masters[i] as RedisNode
    const masterId = ids.get(master) as string
    await waitFor(`replica ${replica.port} to know master ${master.port}`,
      async () => String(await ask(replica.port, ['CLUSTER', 'NODES'])).includes(masterId) || 'not yet')
    await ask(replica.port, ['CLUSTER', 'REPLICATE', masterId])
  }

  /** CLUSTER SLOTS of `node` as one line: `start-end:master,replica…` per range. */
  const slotTable = async (node: RedisNode): Promise<string> => {
    const ranges = await ask(node.port, ['CLUSTER', 'SLOTS']) as Array<[number, number, ...Array<[string, number]>]>
    return ranges
      .map(([start, end, ...serving]) => `${start}-${end}:${serving.map(([, port]) => port).join(',')}`)
      .sort((a, b) => Number(a.split('-')[0]) - Number(b.split('-')[0]))
      .join(' ')
  }
  /** True when every node is ok, knows every node, and all CLUSTER SLOTS tables are the same; else what differs. */
  const agreed = async (): Promise<true | string> => {
    const tables = new Set<string>()
    for (const node of all) {
      const info = await ask(node.port, ['CLUSTER', 'INFO'])
      const state = `state ${infoField(info, 'cluster_state')}, ${infoField(info, 'cluster_known_nodes')} nodes, ${infoField(info, 'cluster_slots_ok')} slots ok`
      if (state !== `state ok, ${all.length} nodes, ${SLOTS} slots ok`) return `node ${node.port}: ${state}`
      tables.add(await slotTable(node))
    }
    if (tables.size !== 1) return `the nodes' CLUSTER SLOTS differ: ${[...tables].join(' | ')}`
    const table = [...tables][0] as string
    if (withReplicas && table.split(' ').some(range => !range.includes(','))) return `a range without its replica: ${table}`
    return true
  }
  await waitFor('the cluster to agree on its slots', agreed)
  for (const replica of replicas) {
    await waitFor(`replica ${replica.port} to sync`, async () => infoField(await ask(replica.port, ['INFO', 'replication']), 'master_link_status') === 'up' || 'link down')
  }

  const slotOf = async (key: string): Promise<number> => Number(await ask(seed.port, ['CLUSTER', 'KEYSLOT', key]))
  /** The master serving `slot`, as `node`'s CLUSTER SLOTS says. */
  const ownerOf = async (slot: number, node: RedisNode = seed): Promise<RedisNode> => {
    const ranges = await ask(node.port, ['CLUSTER', 'SLOTS']) as Array<[number, number, [string, number]]>
    const range = ranges.find(([start, end]) => start <= slot && slot <= end)
    if (range === undefined) throw new Error(`node ${node.port}: no master serves slot ${slot}`)
    return nodeAt(masters, `redis://127.0.0.1:${range[2][1]}`)
  }

  return {
    url: `redis+cluster://${masters.map(node => `127.0.0.1:${node.port}`).join(',')}`,
    nodes: masters.map(node => node.url),
    replicaNodes: replicas.map(node => node.url),
    ports: all.map(node => node.port),
    dir: workspace.dir,
    slotOf,
    nodeFor: async key => (await ownerOf(await slotOf(key))).url,
    migrateSlot: async (slot, toNode, { midway } = {}) => {
      const target = nodeAt(masters, toNode)
      const source = await ownerOf(slot)
      if (source === target) throw new Error(`slot ${slot} is served by ${toNode} already`)
      const targetId = ids.get(target) as string
      await ask(target.port, ['CLUSTER', 'SETSLOT', slot, 'IMPORTING', ids.get(source) as string])
      await ask(source.port, ['CLUSTER', 'SETSLOT', slot, 'MIGRATING', targetId])
      for (;;) {
        const keys = await ask(source.port, ['CLUSTER', 'GETKEYSINSLOT', slot, 100]) as string[]
        if (keys.length === 0) break
        await ask(source.port, ['MIGRATE', '127.0.0.1', target.port, '', 0, 5000, 'KEYS', ...keys])
      }
      await midway?.()
      for (const node of [target, source, ...masters.filter(node => node !== target && node !== source)]) {
        await ask(node.port, ['CLUSTER', 'SETSLOT', slot, 'NODE', targetId])
      }
      await waitFor(`the cluster to agree that ${toNode} serves slot ${slot}`, async () => {
        for (const node of all) {
          const owner = await ownerOf(slot, node)
          if (owner !== target) return `node ${node.port} says ${owner.url}`
        }
        return await agreed()
      })
    },
    clientCount: async namePrefix => await clientCount(all, namePrefix)
  }
}
