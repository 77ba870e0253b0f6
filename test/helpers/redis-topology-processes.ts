import { type ChildProcess, spawn } from 'node:child_process'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { freePort } from './ports.ts'
import type { TestLike } from './redis-server.ts'
import { patient, sleep } from './timing.ts'
import { reapOnExit } from './child-reaper.ts'

/** The CLIENT SETNAME of the helpers' own short-lived connections (never counted by clientCount). */
const PROBE_NAME = 'redis-topology-probe'

/** One redis-server process of a topology (a data node or a sentinel) on a fixed loopback port. */
export interface RedisNode {
  readonly port: number
  /** `redis://127.0.0.1:<port>/0` for a data node, `redis://127.0.0.1:<port>` for a sentinel. */
  readonly url: string
  readonly running: boolean
  /** Starts it (again, on the same port and directory) with `args` after its own, and waits until it answers PING. */
  start: (args?: readonly string[]) => Promise<void>
  /** SIGKILL, and waits for the exit. */
  kill: () => Promise<void>
  /** SIGSTOP (a paused host: connections open, nothing answered) or SIGCONT. */
  signal: (signal: 'SIGSTOP' | 'SIGCONT') => void
  /** The end of what it logged since its last start. */
  log: () => string
}

/** A temp directory under os.tmpdir() whose processes are all SIGKILLed, and the directory removed, at teardown. */
export interface TopologyWorkspace {
  readonly dir: string
  /** A data node: redis-server with no persistence, its files under `<dir>/<name>`; not started yet. */
  dataNode: (name: string, args: (port: number) => readonly string[]) => Promise<RedisNode>
  /** A sentinel: `redis-server <dir>/<name>/sentinel.conf --sentinel`, the conf made of `lines` (port, bind, dir first); not started yet. */
  sentinel: (name: string, lines: readonly string[]) => Promise<RedisNode>
}

/**
 * A workspace for a topology, or undefined when there is no redis-server to start: under CI=true
 * the test fails (a suite whose service is missing must not pass by skipping), else it is skipped
 * with the reason, as testRedis does.
 */
export async function topologyWorkspace (t: TestLike, what: string): Promise<TopologyWorkspace | undefined> {
  const missing = await redisServerMissing()
  if (missing !== undefined) {
    const why = `no redis-server to start a ${what} (install Redis 7): ${missing}`
    if (process.env.CI === 'true') t.fail(why)
    else t.comment(`skipped: ${why}`)
    return undefined
  }
  const dir = await mkdtemp(join(tmpdir(), 'redis-topology-'))
  const nodes: RedisNode[] = []
  t.teardown(async () => {
    await Promise.all(nodes.map(async node => { await node.kill() }))
    await rm(dir, { recursive: true, force: true })
  })
  const node = async (name: string, command: (port: number, nodeDir: string) => Promise<string[]>, url: (port: number) => string): Promise<RedisNode> => {
    const nodeDir = join(dir, name)
    await mkdir(nodeDir)
    const port = await freePort()
    const made = managedNode(port, url(port), nodeDir, await command(port, nodeDir))
    nodes.push(made)
    return made
  }
  return {
    dir,
    dataNode: async (name, args) => await node(name, async (port, nodeDir) => [
      '--port', String(port), '--bind', '127.0.0.1', '--dir', nodeDir, '--save', '', '--appendonly', 'no',
      // the first sync starts at once, and a replica loads it from the socket: no RDB file
      '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0', '--repl-diskless-load', 'on-empty-db',
      // a replica's offset moves at once (CLUSTER SLOTS lists no replica whose offset is 0)
      '--repl-ping-replica-period', '1',
      ...args(port)
    ], port => `redis://127.0.0.1:${port}/0`),
    sentinel: async (name, lines) => await node(name, async (port, nodeDir) => {
      const conf = join(nodeDir, 'sentinel.conf')
      await writeFile(conf, [`port ${port}`, 'bind 127.0.0.1', `dir ${nodeDir}`, ...lines, ''].join('\n'))
      return [conf, '--sentinel']
    }, port => `redis://127.0.0.1:${port}`)
  }
}

/** Why redis-server cannot be run, or undefined when it can. */
async function redisServerMissing (): Promise<string | undefined> {
  return await new Promise(resolve => {
    const child = reapOnExit(spawn('redis-server', ['--version'], { stdio: 'ignore' }))
    child.once('error', error => { resolve(error.message) })
    child.once('exit', code => { resolve(code === 0 ? undefined : `redis-server --version exited with ${code}`) })
  })
}

function managedNode (port: number, url: string, cwd: string, command: readonly string[]): RedisNode {
  let child: ChildProcess | undefined
  let log = ''
  const node: RedisNode = {
    port,
    url,
    get running () { return child !== undefined && child.exitCode === null && child.signalCode === null },
    start: async (args = []) => {
      if (node.running) throw new Error(`redis-server on port ${port} is running already`)
      log = ''
      const spawned = reapOnExit(spawn('redis-server', [...command, ...args], { cwd, stdio: ['ignore', 'pipe', 'pipe'] }))
      child = spawned
      const keep = (text: string): void => { log = (log + text).slice(-4000) }
      spawned.stdout?.setEncoding('utf8').on('data', keep)
      spawned.stderr?.setEncoding('utf8').on('data', keep)
      let failed: Error | undefined
      spawned.once('error', error => { failed = error })
      const until = Date.now() + 10_000
      for (;;) {
        if (failed !== undefined) throw failed
        if (spawned.exitCode !== null) throw new Error(`redis-server on port ${port} exited with ${spawned.exitCode}: ${log}`)
        try {
          await ask(port, ['PING'], 500)
          return
        } catch {
          if (Date.now() > until) throw new Error(`redis-server on port ${port} did not answer within 10 s: ${log}`)
          await sleep(25)
        }
      }
    },
    kill: async () => {
      const running = child
      if (running === undefined || running.exitCode !== null || running.signalCode !== null) return
      const exited = new Promise(resolve => running.once('exit', resolve))
      running.kill('SIGKILL')
      await exited
    },
    signal: signal => { child?.kill(signal) },
    log: () => log
  }
  return node
}

/** One command on a fresh connection to 127.0.0.1:`port`, which is closed after: an error rather than a wait when nothing answers. */
export async function ask (port: number, command: ReadonlyArray<string | number>, timeoutMs = 2000): Promise<unknown> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    enableReadyCheck: false,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    connectionName: PROBE_NAME
  })
  client.on('error', () => {})
  try {
    await client.connect()
    const [name, ...args] = command
    return await client.call(String(name), args)
  } finally {
    client.disconnect()
  }
}

/** `field` of an INFO section (`INFO replication`'s master_link_status, CLUSTER INFO's cluster_state), or undefined. */
export function infoField (info: unknown, field: string): string | undefined {
  return new RegExp(`^${field}:(.*?)\\r?$`, 'm').exec(String(info))?.[1]
}

/** A flat [key, value, key, value…] reply (SENTINEL MASTER, SENTINEL REPLICAS' entries) as an object. */
export function fieldsOf (reply: unknown): Record<string, string> {
  const flat = reply as string[]
  const fields: Record<string, string> = {}
  for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i] as string] = flat[i + 1] as string
  return fields
}

/**
 * Polls `check` every 50 ms until it returns true, for at most `ms`. It returns what it saw
 * otherwise (or throws), which the error names when time is up.
 */
export async function waitFor (what: string, check: () => Promise<true | string>, ms = 30_000): Promise<void> {
  const until = Date.now() + patient(ms)
  let seen = 'nothing yet'
  for (;;) {
    try {
      const result = await check()
      if (result === true) return
      seen = result
    } catch (error) {
      seen = (error as Error).message
    }
    if (Date.now() > until) throw new Error(`${what}: not within ${patient(ms) / 1000} s; last seen: ${seen}`)
    await sleep(50)
  }
}

/**
 * Per running node (keyed by its url), the connections whose CLIENT LIST name starts with
 * `namePrefix`; the helpers' own connection is never counted.
 */
export async function clientCount (nodes: readonly RedisNode[], namePrefix: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {}
  for (const node of nodes.filter(node => node.running)) {
    const list = String(await ask(node.port, ['CLIENT', 'LIST']))
    counts[node.url] = list.split('\n')
      .map(line => / name=(\S*)/.exec(line)?.[1])
      .filter(name => name !== undefined && name !== PROBE_NAME && name.startsWith(namePrefix))
      .length
  }
  return counts
}

/** The node of `url` (`redis://127.0.0.1:<port>…`) among `nodes`; throws when none is. */
export function nodeAt (nodes: readonly RedisNode[], url: string): RedisNode {
  const port = Number(new URL(url).port)
  const node = nodes.find(node => node.port === port)
  if (node === undefined) throw new Error(`${url} is not a node of this topology`)
  return node
}
