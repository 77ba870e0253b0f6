import { type ChildProcess, spawn } from 'node:child_process'
import { Redis } from 'ioredis'
import { freePort } from './ports.ts'

/** TEST_REDIS_URL (CI sets it), else the machine's Redis, database 7. */
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379/7'

/** TEST_REDIS_URL with database `db` instead (files that run at once use databases of their own). */
export function testRedisDb (offset: number): string {
  const url = new URL(TEST_REDIS_URL)
  const base = Number(url.pathname.slice(1) || '0')
  url.pathname = `/${(base + offset) % 16}`
  return url.href
}

/**
 * Whether Redis answers at `url`; when it does not, under CI=true the test fails (a suite whose
 * service is missing must not pass by skipping), else it is skipped with the reason.
 */
export async function redisOrSkip (t: { comment: (why: string) => void, fail: (why: string) => boolean }, url: string): Promise<boolean> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.ping()
    return true
  } catch (error) {
    const why = `Redis at ${url} does not answer: ${(error as Error).message}`
    if (process.env.CI === 'true') t.fail(why)
    else t.comment(`skipped: ${why}`)
    return false
  } finally {
    client.disconnect()
  }
}

/** Empties database `url` (never another one). */
export async function flushRedis (url: string): Promise<void> {
  const client = new Redis(url)
  try { await client.flushdb() } finally { client.disconnect() }
}

/** A private redis-server on a free loopback port, keeping nothing on disk; stop and start it again on the same port. */
export interface PrivateRedis {
  readonly url: string
  stop: () => Promise<void>
  start: () => Promise<void>
}

export async function startPrivateRedis (t: { teardown: (fn: () => unknown) => void }): Promise<PrivateRedis> {
  const port = await freePort()
  let child: ChildProcess | undefined
  const url = `redis://127.0.0.1:${port}/0`
  const start = async (): Promise<void> => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    const until = Date.now() + 10_000
    for (;;) {
      const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
      client.on('error', () => {})
      try {
        await client.connect()
        await client.ping()
        return
      } catch {
        if (Date.now() > until) throw new Error(`redis-server on port ${port} did not start`)
        await new Promise(resolve => setTimeout(resolve, 50))
      } finally {
        client.disconnect()
      }
    }
  }
  const stop = async (): Promise<void> => {
    const running = child
    child = undefined
    if (running === undefined || running.exitCode !== null) return
    const exited = new Promise(resolve => running.once('exit', resolve))
    running.kill('SIGKILL')
    await exited
  }
  await start()
  t.teardown(stop)
  return { url, stop, start }
}
