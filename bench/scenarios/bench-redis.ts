import { Redis } from 'ioredis'
import { setTimeout as sleep } from 'node:timers/promises'
import { type BenchChild, freePort, spawnChild } from '../child-processes.ts'
import { processCpuSeconds } from '../cpu-usage.ts'
import type { BenchContext, PreparedScenario } from '../scenario.ts'

/**
 * The Redis the run-store scenarios share (async, recorded): by default a private redis-server the
 * bench starts on a free loopback port (nothing on disk), stopped with the scenario; the machine's
 * own Redis is never touched. BENCH_REDIS_URL names another one instead (an explicit opt-in: its
 * database is flushed before every target that uses it).
 */
export interface BenchRedis {
  /** RUN_STORE_URL of the sidecars. */
  readonly url: string
  /** The redis-server process: the bench's own child, or found by INFO on a Redis named by BENCH_REDIS_URL (undefined: not on this machine). */
  readonly pid: number | undefined
  /** Empties the database (only that one). */
  flush: () => Promise<void>
  /** INFO memory's used_memory, bytes. */
  usedMemory: () => Promise<number>
  /** used_memory once it stopped moving (two reads 200 ms apart within 1 KiB; at most 10 s): what is kept, not what is in flight. */
  usedMemoryAtRest: () => Promise<number>
  /** MEMORY USAGE of `key`, every element counted (0 when it does not exist). */
  keyBytes: (key: string) => Promise<number>
  /** User + system CPU seconds the redis-server has used so far, read by its pid on this machine as the CPU accounting does (undefined without /proc). */
  cpuSeconds: () => number | undefined
  /** INFO commandstats: calls per command (lower case), since the server started. */
  commandCalls: () => Promise<Map<string, number>>
  /** This client's own address (`127.0.0.1:port`), to tell its commands apart in MONITOR. */
  probeAddress: () => Promise<string>
  /** The scenario's PreparedScenario with the server in its shared processes (CPU-accounted, watched, stopped by close). */
  prepared: (scenario: PreparedScenario) => PreparedScenario
}

const probeOf = (url: string): Redis => {
  const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null })
  probe.on('error', () => {})
  return probe
}

/** Starts a private redis-server (or connects to BENCH_REDIS_URL); `{ skip }` when there is none. */
export async function benchRedis (ctx: BenchContext): Promise<BenchRedis | { skip: string }> {
  const named = ctx.settings.redisUrl
  let child: BenchChild | undefined
  let url = named
  try {
    if (url === undefined) {
      const port = await freePort()
      child = spawnChild({
        name: 'redis-server', command: 'redis-server', args: ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], cwd: ctx.tmpDir, logDir: ctx.tmpDir
      })
      url = `redis://127.0.0.1:${port}/0`
    }
    const probe = await connected(url, child)
    const info = async (section: string): Promise<string> => await probe.info(section)
    const pid = child?.pid ?? Number(/process_id:(\d+)/.exec(await info('server'))?.[1])
    await probe.flushdb()
    const server = child
    const usedMemory = async (): Promise<number> => Number(/used_memory:(\d+)/.exec(await info('memory'))?.[1])
    return {
      url,
      pid: Number.isInteger(pid) ? pid : undefined,
      flush: async () => { await probe.flushdb() },
      usedMemory,
      usedMemoryAtRest: async () => {
        let last = await usedMemory()
        for (const deadline = performance.now() + 10_000; performance.now() < deadline;) {
          await sleep(200)
          const now = await usedMemory()
          if (Math.abs(now - last) < 1024) return now
          last = now
        }
        return last
      },
      keyBytes: async key => Number(await probe.call('MEMORY', 'USAGE', key, 'SAMPLES', '0') ?? 0),
      cpuSeconds: () => Number.isInteger(pid) ? processCpuSeconds(pid) : undefined,
      commandCalls: async () => {
        const calls = new Map<string, number>()
        for (const match of (await info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(match[1] as string, Number(match[2]))
        return calls
      },
      probeAddress: async () => /addr=(\S+)/.exec(String(await probe.client('INFO')))?.[1] ?? '',
      prepared: scenario => ({
        ...scenario,
        children: server === undefined ? scenario.children : [...scenario.children, server],
        // a named Redis on this machine is not the bench's child: its CPU is read by pid (on another machine it is simply not seen)
        ...(server === undefined && Number.isInteger(pid) ? { outsideProcesses: async () => ({ 'redis-server': pid }) } : {}),
        close: async () => {
          probe.disconnect()
          await scenario.close()
          await server?.stop(2000)
        }
      })
    }
  } catch (error) {
    await child?.stop(2000)
    return {
      skip: named === undefined
        ? `no private redis-server could be started (install Redis, or set BENCH_REDIS_URL): ${(error as Error).message}`
        : `Redis at BENCH_REDIS_URL is not reachable: ${(error as Error).message}`
    }
  }
}

/** A connected client of `url`; with `child` (a server just started), waits up to 10 s for it to answer. */
async function connected (url: string, child: BenchChild | undefined): Promise<Redis> {
  const until = Date.now() + 10_000
  for (;;) {
    const probe = probeOf(url)
    try {
      await probe.connect()
      await probe.ping()
      return probe
    } catch (error) {
      probe.disconnect()
      if (child === undefined || Date.now() > until) throw error
      if (child.exited !== null) throw new Error(`redis-server exited (${child.exited.code ?? child.exited.signal}): ${child.logTail(5)}`)
      await sleep(50)
    }
  }
}
