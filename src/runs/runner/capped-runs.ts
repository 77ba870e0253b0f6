import type { TakenRun } from '../run-data.ts'

/**
 * Runs taken while their caller held CALLER_MAX_INFLIGHT slots, set aside per caller in order
 * (a store that cannot pass them over in its queue: a shared one), each given back as one of the
 * caller's calls ends.
 */
export class CappedRuns {
  readonly #runs = new Map<string, TakenRun[]>()

  park (run: TakenRun): void {
    const caller = run.caller as string
    const runs = this.#runs.get(caller)
    if (runs === undefined) this.#runs.set(caller, [run])
    else runs.push(run)
  }

  /** The caller's first run set aside, now that one of its calls ended. */
  next (caller: string): TakenRun | undefined {
    const runs = this.#runs.get(caller)
    if (runs === undefined) return undefined
    const run = runs.shift()
    if (runs.length === 0) this.#runs.delete(caller)
    return run
  }

  /** Every run set aside (a stop), in no particular order. */
  takeAll (): TakenRun[] {
    const all = [...this.#runs.values()].flat()
    this.#runs.clear()
    return all
  }
}
