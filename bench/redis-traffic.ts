import { Redis } from 'ioredis'

/**
 * What the sidecars send a Redis, seen by the server itself: `INFO commandstats` (every command
 * executed, those run inside scripts included) and `MONITOR` on a connection of its own (each line
 * a command, from a client's address or from `lua` when a script ran it). Round trips are
 * approximated by batches: consecutive MONITOR lines of one client, the commands its scripts ran
 * included, each within BATCH_GAP_US of the line before (a pipelined or auto-pipelined batch is
 * read and executed at once; a new request from the same client after a reply comes a loopback
 * round trip later).
 */
export const BATCH_GAP_US = 50

/** The traffic counted up to a moment: subtract two to get a span's. */
export interface TrafficCounts {
  /** INFO commandstats calls, all commands. */
  readonly commands: number
  /** MONITOR lines sent by clients (not the probe's own). */
  readonly clientCommands: number
  /** EVALSHA / EVAL / FCALL among them. */
  readonly scriptCalls: number
  /** MONITOR lines from `lua`: commands scripts ran. */
  readonly luaCommands: number
  /** Batches of client commands (see BATCH_GAP_US). */
  readonly batches: number
  /** Client-sent commands by name (lower case). */
  readonly byClientCommand: Record<string, number>
  /** Commands run inside scripts by name. */
  readonly byLuaCommand: Record<string, number>
}

const SCRIPT_CALLS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro'])

/** Microseconds since the epoch from MONITOR's `1700000000.123456` (exact: within 2^53). */
const micros = (time: string): number => {
  const [seconds = '0', fraction = '0'] = time.split('.')
  return Number(seconds) * 1e6 + Number(fraction.padEnd(6, '0').slice(0, 6))
}

const add = (record: Record<string, number>, key: string): void => { record[key] = (record[key] ?? 0) + 1 }

/** A MONITOR connection counting what it sees, and `counts()` with INFO commandstats beside it. */
export class RedisTraffic {
  readonly #monitor: Redis
  readonly #ignored: Set<string>
  #clientCommands = 0
  #scriptCalls = 0
  #luaCommands = 0
  #batches = 0
  readonly #byClient: Record<string, number> = {}
  readonly #byLua: Record<string, number> = {}
  #lastSource = ''
  #lastAt = 0

  private constructor (monitor: Redis, ignored: Set<string>) {
    this.#monitor = monitor
    this.#ignored = ignored
    monitor.on('monitor', (time: string, args: string[], source: string) => { this.#line(micros(time), String(args[0] ?? '').toLowerCase(), source) })
  }

  /** Starts monitoring `url`; lines from the `ignored` addresses (the bench's own probe) are left out. */
  static async start (url: string, ignored: string[]): Promise<RedisTraffic> {
    const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null })
    client.on('error', () => {})
    const monitor = await client.monitor()
    monitor.on('error', () => {})
    client.disconnect()
    return new RedisTraffic(monitor, new Set(ignored))
  }

  #line (at: number, command: string, source: string): void {
    if (this.#ignored.has(source)) return
    if (source === 'lua') {
      this.#luaCommands++
      add(this.#byLua, command)
    } else {
      this.#clientCommands++
      add(this.#byClient, command)
      if (SCRIPT_CALLS.has(command)) this.#scriptCalls++
      if (source !== this.#lastSource || at - this.#lastAt > BATCH_GAP_US) this.#batches++
      this.#lastSource = source
    }
    this.#lastAt = at
  }

  /** Everything counted so far; `commands`: the sum of `commandCalls` (INFO commandstats, read by the caller). */
  counts (commandCalls: Map<string, number>): TrafficCounts {
    let commands = 0
    for (const calls of commandCalls.values()) commands += calls
    return {
      commands,
      clientCommands: this.#clientCommands,
      scriptCalls: this.#scriptCalls,
      luaCommands: this.#luaCommands,
      batches: this.#batches,
      byClientCommand: { ...this.#byClient },
      byLuaCommand: { ...this.#byLua }
    }
  }

  stop (): void { this.#monitor.disconnect() }
}

const minusRecord = (a: Record<string, number>, b: Record<string, number>): Record<string, number> =>
  Object.fromEntries([...new Set([...Object.keys(a), ...Object.keys(b)])].map(key => [key, (a[key] ?? 0) - (b[key] ?? 0)]))

/** `later − earlier`: the traffic of a span. */
export function between (earlier: TrafficCounts, later: TrafficCounts): TrafficCounts {
  return {
    commands: later.commands - earlier.commands,
    clientCommands: later.clientCommands - earlier.clientCommands,
    scriptCalls: later.scriptCalls - earlier.scriptCalls,
    luaCommands: later.luaCommands - earlier.luaCommands,
    batches: later.batches - earlier.batches,
    byClientCommand: minusRecord(later.byClientCommand, earlier.byClientCommand),
    byLuaCommand: minusRecord(later.byLuaCommand, earlier.byLuaCommand)
  }
}

/** A busy span's traffic less an idle span's (scaled by `idleScale`: busy seconds ÷ idle seconds), per `runs`. */
export function perRun (busy: TrafficCounts, idle: TrafficCounts, idleScale: number, runs: number): TrafficCounts {
  const net = (b: number, i: number): number => (b - i * idleScale) / runs
  const netRecord = (b: Record<string, number>, i: Record<string, number>): Record<string, number> =>
    Object.fromEntries([...new Set([...Object.keys(b), ...Object.keys(i)])].map(key => [key, net(b[key] ?? 0, i[key] ?? 0)]))
  return {
    commands: net(busy.commands, idle.commands),
    clientCommands: net(busy.clientCommands, idle.clientCommands),
    scriptCalls: net(busy.scriptCalls, idle.scriptCalls),
    luaCommands: net(busy.luaCommands, idle.luaCommands),
    batches: net(busy.batches, idle.batches),
    byClientCommand: netRecord(busy.byClientCommand, idle.byClientCommand),
    byLuaCommand: netRecord(busy.byLuaCommand, idle.byLuaCommand)
  }
}
