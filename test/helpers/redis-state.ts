import { Redis } from 'ioredis'
import { startPrivateRedis } from './redis-server.ts'

// What the Lua-level tests of the run store's scripts need: a private server, emptied before each
// test, reached as the store reaches it (RESP3), and its keys read back as plain values.

/** What these helpers need of a tap test. */
interface TestLike {
  teardown: (fn: () => unknown) => void
  beforeEach: (fn: () => unknown) => void
}

/** A client of a private redis-server of the test file's own (RESP3, as the run store's), its database emptied before each test. */
export async function scriptRedis (t: TestLike): Promise<Redis> {
  const server = await startPrivateRedis(t)
  const redis = new Redis(server.url, { protocol: 3 })
  t.teardown(() => { redis.disconnect() })
  t.beforeEach(async () => { await redis.flushdb() })
  return redis
}

/** Redis's clock in ms, as the scripts read it (TIME). */
export async function redisNow (redis: Redis): Promise<number> {
  const [seconds, micros] = await redis.time()
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
}

/** A sorted set's members and scores, lowest first. */
export async function zsetOf (redis: Redis, key: string): Promise<Array<[string, number]>> {
  const pairs = await redis.call('ZRANGE', key, 0, -1, 'WITHSCORES') as Array<[string, string]>
  return pairs.map(([member, score]) => [member, Number(score)])
}

/** A stream's entries: id and fields, as an object. */
export async function streamOf (redis: Redis, key: string): Promise<Array<[string, Record<string, string>]>> {
  const entries = await redis.call('XRANGE', key, '-', '+') as Array<[string, string[]]>
  return entries.map(([id, fields]) => [id, Object.fromEntries(fields.flatMap((value, i) => i % 2 === 0 ? [[value, fields[i + 1] as string]] : []))])
}

/** A stream group's pending entries: id, consumer, delivery count. */
export async function pendingOf (redis: Redis, key: string, group: string): Promise<Array<[string, string, number]>> {
  const pending = await redis.call('XPENDING', key, group, '-', '+', 100) as Array<[string, string, number, number]>
  return pending.map(([id, consumer, , count]) => [id, consumer, count])
}

/** The messages published on `channel` while `during` runs (a subscriber of its own, subscribed first). */
export async function publishedOn (redis: Redis, channel: string, during: () => Promise<unknown>): Promise<string[]> {
  const subscriber = redis.duplicate()
  const messages: string[] = []
  subscriber.on('message', (_channel: string, message: string) => { messages.push(message) })
  try {
    await subscriber.subscribe(channel)
    await during()
    // a PING after them on the subscriber's connection: every message sent before it has arrived
    await subscriber.ping()
    return messages
  } finally {
    subscriber.disconnect()
  }
}
