import { Redis } from 'ioredis'

// The Redis the run-store scenarios share (async, recorded): the settings' `redisUrl`
// (BENCH_REDIS_URL, default database 11 of the machine's Redis), flushed before every target that uses it.

/** The Redis server's pid (its CPU is the targets' work, not other load), or why Redis cannot be used. */
export async function findRedis (url: string): Promise<{ pid: number } | { skip: string }> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  try {
    await redis.connect()
    await redis.flushdb()
    return { pid: Number(/process_id:(\d+)/.exec(await redis.info('server'))?.[1]) }
  } catch (error) {
    return { skip: `Redis at ${url} is not reachable (${(error as Error).message}); set BENCH_REDIS_URL` }
  } finally {
    redis.disconnect()
  }
}
