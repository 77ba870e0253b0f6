import { Redis } from 'ioredis'
import { flushRedis as flush } from '../../test/helpers/redis-server.ts'

// The Redis the run-store scenarios share (async, recorded).

/** BENCH_REDIS_URL (default database 11 of the machine's Redis): flushed before every target that uses it. */
export const redisUrl = (): string => process.env.BENCH_REDIS_URL?.trim() || 'redis://127.0.0.1:6379/11'

export const flushRedis = async (): Promise<void> => { await flush(redisUrl()) }

/** The Redis server's pid (its CPU is the targets' work, not other load), or why Redis cannot be used. */
export async function findRedis (): Promise<{ pid: number } | { skip: string }> {
  const redis = new Redis(redisUrl(), { lazyConnect: true, maxRetriesPerRequest: 1 })
  try {
    await redis.connect()
    await redis.flushdb()
    return { pid: Number(/process_id:(\d+)/.exec(await redis.info('server'))?.[1]) }
  } catch (error) {
    return { skip: `Redis at ${redisUrl()} is not reachable (${(error as Error).message}); set BENCH_REDIS_URL` }
  } finally {
    redis.disconnect()
  }
}
