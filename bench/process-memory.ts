import { writeFileSync } from 'node:fs'
import { readProc } from './cpu-usage.ts'

/**
 * The resident memory of the processes under test (Linux /proc). Each phase starts by resetting
 * the kernel's peak-RSS mark of the target's processes (`echo 5 > /proc/<pid>/clear_refs`), so
 * `VmHWM` read after the phase is the peak of that phase alone, every short spike in it (a sampler
 * would miss those). Where the reset is refused, VmHWM is the peak since the process started:
 * never lower than the phase's own.
 */
const statusMb = (pid: number, field: 'VmHWM' | 'VmRSS'): number | undefined => {
  const kb = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readProc(`${pid}/status`) ?? '')?.[1]
  return kb === undefined ? undefined : Number(kb) * 1024 / 1e6
}

/** Peak RSS of `pid` in MB (10⁶ bytes) since the last reset (or since it started); undefined once it is gone. */
export const peakRssMb = (pid: number): number | undefined => statusMb(pid, 'VmHWM')

/** Current RSS of `pid` in MB (10⁶ bytes); undefined once it is gone. */
export const rssMb = (pid: number): number | undefined => statusMb(pid, 'VmRSS')

/** What a phase's memory accounting found for the target's own processes. */
export interface PeakMemory {
  /** Sum of the processes' peaks, MB (10⁶ bytes; the peaks may fall at different moments: an upper bound of the joint peak). */
  readonly peakRssMb: number
  /** True when every peak mark was reset at the start of the phase (the figure is the phase's own). */
  readonly phaseOnly: boolean
}

/** Resets the peaks of `pids` now (false where the kernel refuses); call the returned function after the phase to read them. */
export function watchPeakRss (pids: number[]): () => PeakMemory | undefined {
  const reset = pids.map(pid => { try { writeFileSync(`/proc/${pid}/clear_refs`, '5'); return true } catch { return false } })
  return () => {
    const peaks = pids.map(peakRssMb)
    if (pids.length === 0 || peaks.some(p => p === undefined)) return undefined
    return { peakRssMb: (peaks as number[]).reduce((total, p) => total + p, 0), phaseOnly: reset.every(Boolean) }
  }
}
