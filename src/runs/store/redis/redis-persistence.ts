import type { Cluster, Redis } from 'ioredis'

/** Where the persistence check reports a setting that can lose runs: one warn line each. */
export type PersistenceWarn = (fields: { runStore: 'redis', setting: string, value: string, node?: string }, message: string) => void

const LOST = 'runs, key claims and webhook deliveries'

/**
 * Once the store first connects, reads the primary's (in a cluster: every master's) `appendonly`
 * and `maxmemory-policy`, and warns of a setting that can lose what the store holds: no AOF (a
 * restart loses what came after the last snapshot), or any eviction policy but `noeviction`. A
 * Redis that refuses CONFIG GET (a managed service, an ACL) is taken as it is: nothing is logged.
 */
export async function checkPersistence (redis: Redis | Cluster, warn: PersistenceWarn): Promise<void> {
  let nodes: NodeSettings[]
  for (;;) {
    if (redis.status !== 'ready') await new Promise(resolve => redis.once('ready', resolve))
    try {
      nodes = await readSettings(redis)
      break
    } catch (error) {
      if ((error as Error).name === 'ReplyError') return // refused: nothing to say
      // not read (the connection dropped): again at the next connect
    }
  }
  for (const { node, appendonly, policy } of nodes) {
    const at = nodes.length > 1 ? { node } : {}
    if (appendonly === 'no') {
      warn({ runStore: 'redis', setting: 'appendonly', value: appendonly, ...at },
        `run store: appendonly is no: a Redis restart loses the ${LOST} written since its last snapshot (set appendonly yes)`)
    }
    if (policy !== undefined && policy !== 'noeviction') {
      warn({ runStore: 'redis', setting: 'maxmemory-policy', value: policy, ...at },
        `run store: maxmemory-policy is ${policy}: a full Redis evicts keys, losing ${LOST} (set maxmemory-policy noeviction)`)
    }
  }
}

interface NodeSettings { node: string, appendonly: string | undefined, policy: string | undefined }

async function readSettings (redis: Redis | Cluster): Promise<NodeSettings[]> {
  const nodes = 'nodes' in redis && typeof redis.nodes === 'function' ? redis.nodes('master') : [redis as Redis]
  return await Promise.all(nodes.map(async node => ({
    node: `${node.options.host ?? ''}:${node.options.port ?? ''}`,
    appendonly: await configValue(node, 'appendonly'),
    policy: await configValue(node, 'maxmemory-policy')
  })))
}

/** One setting (CONFIG GET answers [name, value], or nothing for a name the server hides). */
async function configValue (node: Redis, name: string): Promise<string | undefined> {
  const reply = await node.config('GET', name) as unknown
  return Array.isArray(reply) ? reply[1] as string | undefined : undefined
}
