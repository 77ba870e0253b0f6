import { execFile } from 'node:child_process'
import { existsSync } from 'node:fs'
import { performance } from 'node:perf_hooks'
import { Cluster, Redis } from 'ioredis'
import t from 'tap'
import { reapOnExit } from '../../helpers/child-reaper.ts'
import { startRedisCluster, startSentinelRedis } from '../../helpers/redis-topologies.ts'
import { patient, sleep } from '../../helpers/timing.ts'

// The helpers of test/helpers/redis-topologies.ts, checked through ioredis' own Sentinel and
// Cluster clients: the topologies serve them, a failover and a slot migration happen as they say,
// and nothing (process or file) is left after the test.

// the two topologies share nothing: started side by side, the file takes as long as the Sentinel one
t.jobs = 2

/** `pgrep -af redis-server` lines naming one of `ports` (redis-server titles itself `redis-server 127.0.0.1:<port>`). */
async function processesOn (ports: readonly number[]): Promise<string[]> {
  const listed = await new Promise<string>(resolve => {
    reapOnExit(execFile('pgrep', ['-af', 'redis-server'], (_error, stdout) => { resolve(stdout) }))
  })
  return listed.split('\n').filter(line => ports.some(port => new RegExp(`:${port}\\b`).test(line)))
}

const address = (url: string): { host: string, port: number } => ({ host: '127.0.0.1', port: Number(new URL(url).port) })

/** Reads `key` on `url` directly (not through the topology's client). */
async function getOn (url: string, key: string): Promise<string | null> {
  const client = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null })
  client.on('error', () => {})
  try { return await client.get(key) } finally { client.disconnect() }
}

/** Retries SET `key` through `client` until one succeeds; the milliseconds it took. */
async function writesAgain (client: Redis, key: string, value: string, withinMs: number): Promise<number> {
  const started = performance.now()
  for (;;) {
    try {
      await client.set(key, value)
      return performance.now() - started
    } catch (error) {
      if (performance.now() - started > withinMs) throw error
      await sleep(50)
    }
  }
}

t.test('Sentinel: ioredis follows failover() and sentinelFailover(); nothing is left after', async t => {
  let ports: readonly number[] = []
  let dir = ''
  await t.test('the topology', async t => {
    const started = performance.now()
    const redis = await startSentinelRedis(t)
    if (redis === undefined) return
    ;({ ports, dir } = redis)
    t.comment(`ready in ${Math.round(performance.now() - started)} ms`)
    t.equal(redis.url, `redis+sentinel://${redis.sentinels.map(s => `127.0.0.1:${s.port}`).join(',')}/fleet`)
    t.equal((await processesOn(ports)).length, 5, 'five processes')
    const [first, second] = redis.nodes as [string, string]
    t.equal(await redis.primaryUrl(), first)
    t.equal(await redis.replicaUrl(), second)

    const client = new Redis({ sentinels: [...redis.sentinels], name: 'fleet', connectionName: 'harness-sentinel', failoverDetector: true, maxRetriesPerRequest: 1 })
    client.on('error', () => {})
    t.teardown(() => { client.disconnect() })
    await client.set('before', '1')
    t.equal(await getOn(first, 'before'), '1', 'written on the primary')
    const counts = await redis.clientCount('harness-')
    t.same(Object.keys(counts).sort(), [...redis.nodes, ...redis.sentinels.map(s => `redis://127.0.0.1:${s.port}`)].sort(), 'a count per process')
    t.equal(counts[first], 1, 'one connection of the client on the primary')
    t.equal(counts[second], 0, 'none on the replica')

    let mark = performance.now()
    const promoted = await redis.failover()
    t.comment(`failover() in ${Math.round(performance.now() - mark)} ms`)
    t.equal(promoted, second, 'the replica is the primary')
    t.equal(await redis.primaryUrl(), second)
    // a wait's ceiling (writesAgain throws past it): that the write landed on the new primary is the proof
    const ms = await writesAgain(client, 'after', '2', patient(10_000))
    t.comment(`the client writes again after ${Math.round(ms)} ms`)
    t.equal(await getOn(second, 'after'), '2', 'the client writes again, on the new primary')
    t.equal(await getOn(second, 'before'), '1', 'which has what was written before')
    t.notOk(first in await redis.clientCount('harness-'), 'the killed node is not counted')
    await t.rejects(redis.ready(), { message: `data node ${first} is down: restartOld() first` })

    mark = performance.now()
    await redis.restartOld()
    t.comment(`restartOld() in ${Math.round(performance.now() - mark)} ms`)
    t.equal(await getOn(first, 'after'), '2', 'the old primary came back as a replica of the new one')

    mark = performance.now()
    t.equal(await redis.sentinelFailover(), first, 'SENTINEL FAILOVER makes the old primary the primary again')
    t.comment(`sentinelFailover() in ${Math.round(performance.now() - mark)} ms`)
    t.equal(await redis.primaryUrl(), first)
    // the old primary is not killed: the client moves when the sentinels publish +switch-master
    const until = performance.now() + patient(10_000)
    for (;;) {
      await writesAgain(client, 'graceful', '3', patient(10_000))
      if (await getOn(first, 'graceful') === '3' || performance.now() > until) break
      await sleep(50)
    }
    t.equal(await getOn(first, 'graceful'), '3', 'the client writes to the new primary')
  })
  t.same(await processesOn(ports), [], 'every process is gone')
  t.equal(existsSync(dir), false, 'the temp directory is gone')
})

t.test('Cluster with replicas: ioredis follows migrateSlot() (ASK midway, MOVED after); nothing is left after', async t => {
  let ports: readonly number[] = []
  let dir = ''
  await t.test('the topology', async t => {
    const started = performance.now()
    const cluster = await startRedisCluster(t, { replicas: true })
    if (cluster === undefined) return
    ;({ ports, dir } = cluster)
    t.comment(`ready in ${Math.round(performance.now() - started)} ms`)
    t.equal(cluster.url, `redis+cluster://${cluster.nodes.map(url => `127.0.0.1:${new URL(url).port}`).join(',')}`)
    t.equal(cluster.nodes.length, 3)
    t.equal(cluster.replicaNodes.length, 3)
    t.equal((await processesOn(ports)).length, 6, 'six processes')

    const client = new Cluster(cluster.nodes.map(address), { redisOptions: { connectionName: 'harness-cluster' } })
    client.on('error', () => {})
    t.teardown(() => { client.disconnect() })
    await client.set('user:1', 'a')
    const slot = await cluster.slotOf('user:1')
    t.equal(slot, 10778, 'CLUSTER KEYSLOT')
    const source = await cluster.nodeFor('user:1')
    t.equal(source, cluster.nodes[1], 'slot 10778 is on the second master')
    t.equal(await getOn(source, 'user:1'), 'a', 'the key is on that node')
    const counts = await cluster.clientCount('harness-cluster')
    t.same(Object.keys(counts).sort(), [...cluster.nodes, ...cluster.replicaNodes].sort(), 'a count per node')
    t.ok(Object.values(counts).every(count => count <= 1), `at most one connection of the client per node: ${JSON.stringify(counts)}`)

    const target = cluster.nodes[0] as string
    await cluster.migrateSlot(slot, target, {
      midway: async () => {
        await t.rejects(getOn(source, 'user:1'), { message: `ASK ${slot} 127.0.0.1:${new URL(target).port}` }, 'the source answers ASK')
        t.equal(await client.get('user:1'), 'a', 'the client follows the ASK')
      }
    })
    t.equal(await cluster.nodeFor('user:1'), target, 'the slot is on the target')
    await t.rejects(getOn(source, 'user:1'), { message: `MOVED ${slot} 127.0.0.1:${new URL(target).port}` }, 'the source answers MOVED')
    t.equal(await client.get('user:1'), 'a', 'the client follows the MOVED')
    await client.set('user:1', 'b')
    t.equal(await getOn(target, 'user:1'), 'b', 'and writes on the target')
    const replica = cluster.replicaNodes[cluster.nodes.indexOf(target)] as string
    await t.rejects(getOn(replica, 'user:1'), { message: `MOVED ${slot} 127.0.0.1:${new URL(target).port}` }, 'whose replica redirects to it')
  })
  t.same(await processesOn(ports), [], 'every process is gone')
  t.equal(existsSync(dir), false, 'the temp directory is gone')
})
