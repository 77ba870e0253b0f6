import { readFileSync } from 'node:fs'

/** A file under /proc, or undefined (no /proc, or the process is gone): the bench's one reader of the kernel's figures. */
export function readProc (path: string): string | undefined {
  try {
    return readFileSync(`/proc/${path}`, 'utf8')
  } catch {
    return undefined
  }
}

/** Kernel clock ticks per second (USER_HZ): 100 on every Linux the bench runs on. */
const CLOCK_TICKS = 100

/** Sums fields of a /proc line (`indexes` into its space-separated values), in seconds; undefined when one is not a number. */
function ticks (line: string | undefined, indexes: number[]): number | undefined {
  const fields = line?.trim().split(/\s+/)
  const seconds = fields === undefined ? NaN : indexes.reduce((total, i) => total + Number(fields[i]), 0) / CLOCK_TICKS
  return Number.isFinite(seconds) ? seconds : undefined
}

/** User + system CPU seconds `pid` has used so far (fields after the command name, which may hold spaces). */
export const processCpuSeconds = (pid: number): number | undefined => {
  const stat = readProc(`${pid}/stat`)
  return ticks(stat?.slice(stat.lastIndexOf(')') + 2), [11, 12])
}

/** CPU seconds the whole machine has been busy so far (`cpu  user nice system idle iowait irq softirq steal`). */
const machineBusySeconds = (): number | undefined => ticks(readProc('stat')?.split('\n', 1)[0], [1, 2, 3, 6, 7, 8])

export interface CpuSample<T> {
  result: T
  /** CPU seconds per process name, plus `load generator` (this process). */
  cpuSeconds: Record<string, number>
  /** Cores' worth of CPU used by everything else on the machine meanwhile (noise); undefined without /proc. */
  backgroundCores: number | undefined
  /** How long `work` took, seconds. */
  wallSeconds: number
}

/**
 * CPU seconds used by each of `pids` (by name) while `work` ran, this process's own, and the
 * machine's background. `lateProcesses`, looked up once `work` is done, names processes that may
 * have started meanwhile (e.g. database backends): those not in `pids` count with all their CPU.
 */
export async function measureCpu<T> (pids: Record<string, number>, work: () => Promise<T>,
  lateProcesses?: () => Promise<Record<string, number>>): Promise<CpuSample<T>> {
  const before = Object.fromEntries(Object.entries(pids).map(([name, pid]) => [name, processCpuSeconds(pid)]))
  const machineBefore = machineBusySeconds()
  const self = process.cpuUsage()
  const startedAt = performance.now()
  const result = await work()
  const wallSeconds = (performance.now() - startedAt) / 1000
  const selfUsed = process.cpuUsage(self)
  const machineAfter = machineBusySeconds()
  const cpuSeconds: Record<string, number> = {}
  for (const [name, pid] of Object.entries(pids)) {
    const start = before[name]
    const end = processCpuSeconds(pid)
    if (start !== undefined && end !== undefined) cpuSeconds[name] = end - start
  }
  for (const [name, pid] of Object.entries(await lateProcesses?.() ?? {})) {
    const total = pids[name] === undefined ? processCpuSeconds(pid) : undefined
    if (total !== undefined) cpuSeconds[name] = total
  }
  cpuSeconds['load generator'] = (selfUsed.user + selfUsed.system) / 1e6
  const ours = Object.values(cpuSeconds).reduce((total, v) => total + v, 0)
  const backgroundCores = machineBefore === undefined || machineAfter === undefined || wallSeconds <= 0
    ? undefined
    : Math.max(0, (machineAfter - machineBefore - ours) / wallSeconds)
  return { result, cpuSeconds, backgroundCores, wallSeconds }
}

/**
 * Holds a measurement back while something else keeps the machine busy (a shared machine: other
 * people's test runs), up to `maxWaitSeconds` per call and `budgetSeconds` over the whole run.
 */
export class QuietGate {
  #budgetMs: number
  constructor (readonly thresholdCores: number, readonly maxWaitSeconds: number, budgetSeconds: number,
    readonly log: (line: string) => void) {
    this.#budgetMs = budgetSeconds * 1000
  }

  /** Resolves once a 1 s sample of the machine shows at most `thresholdCores` used outside `pids` and this process. */
  async wait (pids: number[]): Promise<void> {
    const startedAt = Date.now()
    for (let warned = false; ; warned = true) {
      const { backgroundCores: busy } = await measureCpu(Object.fromEntries(pids.map(pid => [String(pid), pid])),
        async () => await new Promise(resolve => setTimeout(resolve, 1000)))
      if (busy === undefined || busy <= this.thresholdCores) break
      const waited = Date.now() - startedAt
      if (waited >= this.maxWaitSeconds * 1000 || waited >= this.#budgetMs) {
        this.log(`machine still busy (${busy.toFixed(2)} cores of other load); measuring anyway`)
        break
      }
      if (!warned) this.log(`machine busy (${busy.toFixed(2)} cores of other load); waiting for it to calm down`)
    }
    this.#budgetMs -= Date.now() - startedAt
  }
}
