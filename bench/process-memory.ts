import { readFileSync, writeFileSync } from 'node:fs'

/**
 * The resident memory of the processes under test (Linux /proc). Each phase starts by resetting
 * the kernel's peak-RSS mark of the target's processes (`echo 5 > /proc/<pid>/clear_refs`), so
 * `VmHWM` read after the phase is the peak of that phase alone, with every short spike in it (a
 * sampler would miss those). Where the reset is refused, VmHWM is the peak since the process
 * started (warm-up and earlier phases included): never lower than the phase's own peak.
 */

function statusField (pid: number, field: 'VmHWM' | 'VmRSS'): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8')
    const kb = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1]
    return kb === undefined ? undefined : Number(kb) * 1024 / 1e6
  } catch {
    return undefined
  }
}

/** Resets the peak-RSS mark of `pid` to its current RSS; false when the kernel refused (or no /proc). */
export function resetPeakRss (pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5')
    return true
  } catch {
    return false
  }
}

/** Peak RSS of `pid` in MB (10⁶ bytes) since the last reset (or since it started); undefined once it is gone. */
export const peakRssMb = (pid: number): number | undefined => statusField(pid, 'VmHWM')

/** Current RSS of `pid` in MB (10⁶ bytes); undefined once it is gone. */
export const rssMb = (pid: number): number | undefined => statusField(pid, 'VmRSS')

/** What a phase's memory accounting found for the target's own processes. */
export interface PeakMemory {
  /** Sum of the processes' peaks, MB (10⁶ bytes; the peaks may fall at different moments: an upper bound of the joint peak). */
  readonly peakRssMb: number
  /** True when every peak mark was reset at the start of the phase (the figure is the phase's own). */
  readonly phaseOnly: boolean
}

/** Resets the peaks of `pids` now; call the returned function after the phase to read them. */
export function watchPeakRss (pids: number[]): () => PeakMemory | undefined {
  const reset = pids.map(resetPeakRss)
  return () => {
    if (pids.length === 0) return undefined
    const peaks = pids.map(peakRssMb)
    if (peaks.some(p => p === undefined)) return undefined
    return { peakRssMb: (peaks as number[]).reduce((total, p) => total + p, 0), phaseOnly: reset.every(Boolean) }
  }
}
