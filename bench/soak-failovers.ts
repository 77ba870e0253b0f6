import { spawnSync } from 'node:child_process'
import { rmSync } from 'node:fs'
import { connect } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { type SentinelRedis, startSentinelRedis } from '../test/helpers/redis-topologies.ts'

/**
 * The fleet soak's Redis (bench/soak-fleet.ts): a Sentinel topology (a primary, a replica, three
 * sentinels; test/helpers/redis-sentinel-topology.ts), and its failovers: the primary SIGKILLed,
 * the replica promoted, the killed node started again as the new primary's replica. A SIGKILLed
 * primary can lose what it acknowledged in its last instant (asynchronous replication), so each
 * failover's window (from 1 s before the kill to 2 s after the sentinels name the new primary)
 * is where the soak may find an accepted async run vanished (see inFailoverWindow).
 */

/** One failover, its times in seconds since the traffic began. */
export interface Failover {
  /** When the old primary's process died (a connection held to it closed). */
  killedAt: number
  /** When every sentinel named the new primary and it answered ROLE master. */
  switchedAt: number
  /** When the killed node was back as the new primary's replica and the topology whole again. */
  rejoinedAt: number
  oldPrimary: string
  newPrimary: string
}

/** Before the kill: a write acknowledged this long before it may not have reached the replica. */
const BEFORE_KILL_S = 1
/** After the switch: the sidecars hear of the new primary within about this. */
const AFTER_SWITCH_S = 2

/** The failover whose window holds `t` (seconds since the traffic began), if any. */
export function inFailoverWindow (failovers: readonly Failover[], t: number): Failover | undefined {
  return failovers.find(f => t >= f.killedAt - BEFORE_KILL_S && t <= f.switchedAt + AFTER_SWITCH_S)
}

/** Where `t` sits against the failovers and the sidecar kills: `at 61.234 s (nearest failover: primary killed at 60.500 s, switch at 62.100 s; nearest sidecar kill at 120.002 s)`. */
export function whenAgainstFailovers (failovers: readonly Failover[], sidecarKills: readonly number[], t: number): string {
  const nearest = [...failovers].sort((a, b) => Math.abs(a.killedAt - t) - Math.abs(b.killedAt - t))[0]
  const kill = [...sidecarKills].sort((a, b) => Math.abs(a - t) - Math.abs(b - t))[0]
  const around = nearest === undefined ? 'no failover' : `nearest failover: primary killed at ${nearest.killedAt.toFixed(3)} s, switch at ${nearest.switchedAt.toFixed(3)} s`
  return `at ${t.toFixed(3)} s (${around}; nearest sidecar kill ${kill === undefined ? 'none' : `at ${kill.toFixed(3)} s`})`
}

export interface SoakSentinel {
  readonly redis: SentinelRedis
  /** failover(), then restartOld({ asReplica: true }); `elapsed` gives the soak's clock. */
  failover: (elapsed: () => number) => Promise<Failover>
  /** Every process of the topology killed, its directory removed. */
  stop: () => Promise<void>
  /** The same, synchronously, for a signal handler (SHUTDOWN NOSAVE through redis-cli). */
  stopNow: () => void
}

/** Starts the topology; throws when there is no redis-server. */
export async function startSoakSentinel (): Promise<SoakSentinel> {
  const teardowns: Array<() => unknown> = []
  let missing = 'no redis-server'
  // what startSentinelRedis needs of a tap test: its teardowns run by stop()
  const t = {
    comment: (why: string) => { missing = why },
    fail: (why: string) => { missing = why; return false },
    teardown: (fn: () => unknown) => { teardowns.push(fn) }
  }
  const redis = await startSentinelRedis(t, { masterName: 'soak' })
  const stop = async (): Promise<void> => {
    for (const fn of teardowns.splice(0).reverse()) await fn()
  }
  if (redis === undefined) throw new Error(`soak fleet: ${missing}`)
  return {
    redis,
    stop,
    stopNow: () => {
      for (const port of redis.ports) spawnSync('redis-cli', ['-p', String(port), 'SHUTDOWN', 'NOSAVE'], { stdio: 'ignore', timeout: 2000 })
      rmSync(redis.dir, { recursive: true, force: true })
    },
    failover: async elapsed => {
      await redis.ready()
      const oldPrimary = await redis.primaryUrl()
      const { closed } = await holdConnection(Number(new URL(oldPrimary).port), elapsed)
      const newPrimary = await redis.failover()
      const switchedAt = elapsed()
      await redis.restartOld({ asReplica: true })
      return { killedAt: await closed, switchedAt, rejoinedAt: elapsed(), oldPrimary, newPrimary }
    }
  }
}

/** Holds an idle connection to 127.0.0.1:`port`; resolves once connected, `closed` with the time it closes, which is when the process dies. */
async function holdConnection (port: number, elapsed: () => number): Promise<{ closed: Promise<number> }> {
  for (let tries = 0; ; tries++) {
    const socket = connect({ port, host: '127.0.0.1' })
    const opened = await new Promise<boolean>(resolve => {
      socket.once('connect', () => { resolve(true) })
      socket.once('error', () => { resolve(false) })
    })
    if (opened) {
      socket.on('error', () => {})
      socket.on('data', () => {})
      return { closed: new Promise(resolve => socket.once('close', () => { resolve(elapsed()) })) }
    }
    socket.destroy()
    if (tries === 20) throw new Error(`soak fleet: cannot connect to the primary on ${port}`)
    await sleep(50)
  }
}
