import { type ChildProcess, spawn } from 'node:child_process'
import { Redis } from 'ioredis'
import { freePort } from './ports.ts'
import { reapOnExit } from './child-reaper.ts'

/** What the Redis helpers need of a tap test. */
export interface TestLike {
  comment: (why: string) => void
  fail: (why: string) => boolean
  teardown: (fn: () => unknown) => void
}

/**
 * The Redis a test file may flush: a private redis-server of its own on a free port (stopped with
 * the test), or TEST_REDIS_URL when it is set: an explicit opt-in, whose database is emptied. The
 * machine's own Redis is never used unless named. Undefined when there is none: under CI=true the
 * test fails (a suite whose service is missing must not pass by skipping), else it is skipped with
 * the reason.
 */
export async function testRedis (t: TestLike): Promise<string | undefined> {
  const named = process.env.TEST_REDIS_URL
  try {
    if (named === undefined || named === '') return (await startPrivateRedis(t)).url
    await ping(named)
    return named
  } catch (error) {
    const why = named === undefined || named === ''
      ? `no redis-server to start (install Redis, or set TEST_REDIS_URL): ${(error as Error).message}`
      : `Redis at TEST_REDIS_URL does not answer: ${(error as Error).message}`
    if (process.env.CI === 'true') t.fail(why)
    else t.comment(`skipped: ${why}`)
    return undefined
  }
}

async function ping (url: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null })
  client.on('error', () => {})
  try {
    await client.connect()
    await client.ping()
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
  /** SIGSTOP: the server keeps its connections and answers nothing (a hung or partitioned Redis). */
  pause: () => void
  /** SIGCONT after pause(). */
  resume: () => void
}

/** `args`: more redis-server options, after the defaults (e.g. `--appendonly yes`). */
export async function startPrivateRedis (t: { teardown: (fn: () => unknown) => void }, args: readonly string[] = []): Promise<PrivateRedis> {
  const port = await freePort()
  let child: ChildProcess | undefined
  const url = `redis://127.0.0.1:${port}/0`
  const start = async (): Promise<void> => {
    const spawned = reapOnExit(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...args], { stdio: 'ignore' }))
    child = spawned
    let failed: Error | undefined
    spawned.once('error', error => { failed = error }) // ENOENT: no redis-server on PATH
    const until = Date.now() + 10_000
    for (;;) {
      if (failed !== undefined) throw failed
      try {
        await ping(url)
        return
      } catch {
        if (Date.now() > until) throw new Error(`redis-server on port ${port} did not start`)
        await new Promise(resolve => setTimeout(resolve, 50))
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
  return { url, stop, start, pause: () => child?.kill('SIGSTOP'), resume: () => child?.kill('SIGCONT') }
}

/** A private redis-server as the run store of sidecars serving app `p/a`: their variables, and a client to look inside it. */
export interface PrivateRunStore extends PrivateRedis {
  /** RUN_STORE_URL, PROJECT_ID and APP_NAME. */
  readonly env: Record<string, string>
  readonly probe: Redis
  /** INFO memory's used_memory, in bytes. */
  usedMemory: () => Promise<number>
}

export async function privateRunStore (t: { teardown: (fn: () => unknown) => void }): Promise<PrivateRunStore> {
  const redis = await startPrivateRedis(t)
  const probe = new Redis(redis.url)
  t.teardown(() => { probe.disconnect() })
  return {
    ...redis,
    env: { RUN_STORE_URL: redis.url, PROJECT_ID: 'p', APP_NAME: 'a' },
    probe,
    usedMemory: async () => Number(/used_memory:(\d+)/.exec(await probe.info('memory'))?.[1])
  }
}
