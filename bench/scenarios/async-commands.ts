import { setTimeout as sleep } from 'node:timers/promises'
import { Latencies, type Measurement, summarize } from '../load.ts'
import { runPaced } from '../paced-load.ts'
import { between, perRun, RedisTraffic, type TrafficCounts } from '../redis-traffic.ts'
import type { BenchRedis } from './bench-redis.ts'
import { appStats, type Fleet, HOLD_MS, PACED_RATE, resetApp, runsSucceeded, submitAll } from './async-runs.ts'

/**
 * How the runs of a commands phase come (issue 39): `paced`, PACED_RATE a second; `backlog`, every
 * slot's work for the phase submitted at once (20 at a time), the processes taking run after run;
 * `one`, one run at a time (the next submitted once the one before ended), for the phase.
 */
export type CommandLoad = 'paced' | 'backlog' | 'one'

/** How long after the idle span the steady idle window begins (RUN_LOST_AFTER_SECONDS, 30 by default, and a 10 s heartbeat). */
const STEADY_SETTLE_SECONDS = Number(process.env.BENCH_IDLE_SETTLE_SECONDS ?? 40)
/** The steady idle window. */
const STEADY_SECONDS = Number(process.env.BENCH_IDLE_SECONDS ?? 30)

/**
 * What one async run costs the Redis (issue 30): a busy span (PACED_RATE runs a second for the
 * phase, submitted to the fleet, run at the app, until the fleet counted each one succeeded: its
 * end written) and then an idle span as long (no runs), each counted by the server (INFO
 * commandstats) and by MONITOR on a connection of its own (bench/redis-traffic.ts). Per run =
 * (busy − idle × busy seconds ÷ idle seconds) ÷ runs. Knowing that every run ended takes reads of
 * the sidecars' /metrics, which ask the run store for their queue gauges (the BullMQ workers count
 * theirs without Redis): the idle span ends with as many reads, so they cancel out. The idle
 * commands per second and process come from the idle span before those reads, from MONITOR alone
 * (client lines and lines from scripts; no INFO read of the bench's own lands in it); the steady
 * idle ones from a window of STEADY_SECONDS that begins STEADY_SETTLE_SECONDS after it.
 */
export async function commandsPhase (fleet: Fleet, redis: BenchRedis, durationSeconds: number, load: CommandLoad = 'paced'): Promise<Measurement> {
  const { app } = fleet
  await fleet.settled()
  const before = await fleet.succeeded()
  const traffic = await RedisTraffic.start(redis.url, [await redis.probeAddress()])
  try {
    const counts = async (): Promise<TrafficCounts> => traffic.counts(await redis.commandCalls())
    await resetApp(app)
    const busyFrom = performance.now()
    const atStart = await counts()
    const { submitted, reads: readsDuring } = await loadOf(fleet, before, durationSeconds, load)
    for (const deadline = performance.now() + 60_000; performance.now() < deadline; await sleep(10)) {
      if ((await appStats(app)).calls >= submitted.ok) break
    }
    const ended = await runsSucceeded(fleet, before, submitted.ok)
    const done = ended.done
    const reads = ended.reads + readsDuring
    const busyEnd = await counts()
    const busySeconds = (performance.now() - busyFrom) / 1000
    await sleep(busySeconds * 1000)
    const quietEnd = traffic.counts(new Map())
    const quietSeconds = (performance.now() - busyFrom) / 1000 - busySeconds
    for (let i = 0; i < reads; i++) await fleet.succeeded()
    const idleEnd = await counts()
    const idleSeconds = (performance.now() - busyFrom) / 1000 - busySeconds
    // the steady idle (the paced phase's only): once the processes have let go of what they held (a
    // sidecar beats while it holds runs, and releases its lease a heartbeat after the last), a window of its own
    let steadySeconds = Number.NaN
    let steady = between(traffic.counts(new Map()), traffic.counts(new Map()))
    if (load === 'paced') {
      await sleep(STEADY_SETTLE_SECONDS * 1000)
      const steadyFrom = traffic.counts(new Map())
      const steadyStart = performance.now()
      await sleep(STEADY_SECONDS * 1000)
      steady = between(steadyFrom, traffic.counts(new Map()))
      steadySeconds = (performance.now() - steadyStart) / 1000
    }
    const busy = between(atStart, busyEnd)
    const idle = between(busyEnd, idleEnd)
    const quiet = between(busyEnd, quietEnd)
    const runs = Math.max(1, done)
    // paced: the idle traffic scaled to the busy span's seconds; with a backlog or one at a time the
    // fleet's count is read often (a sidecar's read asks the run store), and the idle span, as long
    // as the busy one plus those reads, takes them away one for one
    const each = perRun(busy, idle, load === 'paced' ? busySeconds / idleSeconds : 1, runs)
    const byCommand = (prefix: string, record: Record<string, number>): Array<[string, number]> =>
      Object.entries(record).filter(([, n]) => Math.abs(n) >= 0.005).map(([name, n]) => [`${prefix}${name}`, n])
    return {
      ...submitted,
      valid: submitted.valid && done === submitted.ok,
      extra: {
        runs: done,
        commandsPerRun: each.commands,
        clientCommandsPerRun: each.clientCommands,
        roundTripsPerRun: each.batches,
        scriptCallsPerRun: each.scriptCalls,
        luaCommandsPerRun: each.luaCommands,
        idleCommandsPerSecond: idle.commands / idleSeconds,
        idleCommandsPerProcessPerSecond: (quiet.clientCommands + quiet.luaCommands) / quietSeconds / fleet.processes,
        ...(load === 'paced' ? { steadyIdleCommandsPerProcessPerSecond: (steady.clientCommands + steady.luaCommands) / steadySeconds / fleet.processes } : {}),
        ...Object.fromEntries([...byCommand('client.', each.byClientCommand), ...byCommand('lua.', each.byLuaCommand)])
      }
    }
  } finally {
    traffic.stop()
  }
}

/**
 * The runs of a commands phase as `load` says, and the reads of the fleet's count it took (a
 * sidecar's /metrics read asks the run store: the idle span repeats them).
 */
async function loadOf (fleet: Fleet, before: number, durationSeconds: number, load: CommandLoad): Promise<{ submitted: Measurement, reads: number }> {
  if (load === 'paced') return { submitted: await runPaced(fleet.submit, PACED_RATE, durationSeconds), reads: 0 }
  const started = performance.now()
  const latencies = new Latencies()
  const statusCodes: Record<string, number> = {}
  const add = (sent: Awaited<ReturnType<typeof submitAll>>): void => {
    for (const [status, n] of Object.entries(sent.statusCodes)) statusCodes[status] = (statusCodes[status] ?? 0) + n
    for (const value of sent.latencies.values.subarray(0, sent.latencies.count)) latencies.push(value)
  }
  let runs = 0
  let reads = 0
  if (load === 'backlog') {
    runs = Math.round(fleet.slots * (1000 / HOLD_MS) * durationSeconds)
    add(await submitAll(fleet.submit, runs))
  } else {
    while (performance.now() - started < durationSeconds * 1000) {
      add(await submitAll(fleet.submit, 1))
      runs++
      const ended = await runsSucceeded(fleet, before, runs, 10_000)
      reads += ended.reads
      if (ended.done < runs) break
    }
  }
  const ok = statusCodes['202'] ?? 0
  const submitted = summarize(latencies, { ok, errors: 0, timeouts: 0, non2xx: runs - ok, statusCodes, durationSeconds: (performance.now() - started) / 1000, connections: 20 })
  return { submitted, reads }
}

/** `xadd 1.00, evalsha 3.00` from a measurement's `client.` or `lua.` figures, largest first. */
export function commandList (extra: Record<string, number> | undefined, prefix: 'client.' | 'lua.'): string {
  const entries = Object.entries(extra ?? {}).filter(([key]) => key.startsWith(prefix)).sort((a, b) => b[1] - a[1])
  return entries.length === 0 ? 'none' : entries.map(([key, n]) => `${key.slice(prefix.length)} ${n.toFixed(2)}`).join(', ')
}
