import { setTimeout as sleep } from 'node:timers/promises'
import type { BenchChild } from '../child-processes.ts'
import type { BenchContext } from '../scenario.ts'
import { GREETING_BODY, type StartedServer, startScriptServer } from '../targets.ts'
import type { Fleet } from './async-runs.ts'
import type { BenchRedis } from './bench-redis.ts'

/**
 * The BullMQ peer of the async scenario's fleets (issue 39): the same work as `fleet-2` on the
 * same Redis, done by BullMQ. A producer process (bench/bullmq-producer.mjs: HTTP POST /run →
 * Queue.add, 202 once it resolved) and WORKERS worker processes (bench/bullmq-worker.mjs: a Worker
 * of CONCURRENCY jobs at once, each job's request sent to the app with undici). The bench submits
 * over HTTP to the producer as it does to a sidecar, and learns that jobs ended from the workers'
 * own counts (no Redis command of its own, where a sidecar's /metrics read asks the Redis).
 */
export const BULLMQ_VERSION = '6.7.0'
export const WORKERS = 2
export const CONCURRENCY = 2
const QUEUE_NAME = 'bench-runs'

interface WorkerStats { completed: number, failed: number, active: number }
const statsOf = async <T>(server: StartedServer): Promise<T> => await (await fetch(`${server.origin}/stats`)).json() as T

/** Expects the producer's 202 {"job_id", "status": "queued"}. */
export const expectJobQueued = (status: number, body: string): void => {
  if (status !== 202) throw new Error(`expected 202, got ${status}: ${body.slice(0, 200)}`)
  if (!/^\{"job_id":"[^"]+","status":"queued"\}$/.test(body)) throw new Error(`unexpected body: ${body.slice(0, 200)}`)
}

/** Starts the producer and the workers on `redis` in front of `app`: the peer as a Fleet, its processes, and how to stop them. */
export async function startBullmqPeer (ctx: BenchContext, redis: BenchRedis, app: StartedServer): Promise<{ fleet: Fleet, children: BenchChild[], stop: () => Promise<void> }> {
  const started: StartedServer[] = []
  const stop = async (): Promise<void> => { for (const server of started) await server.child.stop() }
  try {
    const env = { REDIS_URL: redis.url, QUEUE_NAME }
    const producer = await startScriptServer(ctx, 'bullmq-producer', 'bullmq-producer', env)
    started.push(producer)
    const workers: StartedServer[] = []
    for (let i = 1; i <= WORKERS; i++) {
      workers.push(await startScriptServer(ctx, 'bullmq-worker', `bullmq-worker-${i}`, { ...env, APP_URL: app.origin, CONCURRENCY: String(CONCURRENCY) }))
      started.push(workers[workers.length - 1] as StartedServer)
    }
    const workerStats = async (): Promise<WorkerStats> => {
      const all = await Promise.all(workers.map(async w => await statsOf<WorkerStats>(w)))
      return all.reduce((sum, s) => ({ completed: sum.completed + s.completed, failed: sum.failed + s.failed, active: sum.active + s.active }))
    }
    const fleet: Fleet = {
      slots: WORKERS * CONCURRENCY,
      // the producer's Queue connection stays open beside the workers'
      processes: WORKERS + 1,
      app,
      submit: { url: `${producer.origin}/run`, method: 'POST', headers: { 'content-type': 'application/json' }, body: GREETING_BODY },
      succeeded: async () => (await workerStats()).completed,
      settled: async () => {
        for (const deadline = performance.now() + 60_000; performance.now() < deadline; await sleep(20)) {
          const { added } = await statsOf<{ added: number }>(producer)
          const { completed, failed, active } = await workerStats()
          if (active === 0 && completed + failed >= added) return
        }
        throw new Error('the BullMQ workers did not settle within 60 s')
      },
      // its events stream, trimmed to ~10,000 entries (Queue streams.events.maxLen's default)
      cappedKeys: [`bull:${QUEUE_NAME}:events`]
    }
    return { fleet, children: started.map(s => s.child), stop }
  } catch (error) {
    await stop()
    throw error
  }
}
