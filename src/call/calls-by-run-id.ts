import { ReplicaStoppedError, RunCanceledError } from '../errors.ts'
import type { StageCall } from './stage-call.ts'

/** Which app a canceled run belongs to (the `_runs` route's project and app). */
interface CancelScope {
  readonly projectId: string
  readonly appName: string
}

/**
 * A call's place in the map while it is in flight. It, not the call, is what the map holds: a
 * table V8 has rehashed away keeps its entries until the next full collection, so a call it held
 * outlived scavenges with its request, response and buffers, promoted to the old space (a plain
 * call cost ~20% more CPU, most of it in collections). An entry lets go of its call as it leaves.
 * Calls sent with the same run id are chained, newest first (`older`).
 */
class InFlightEntry {
  call: StageCall | undefined
  older: InFlightEntry | undefined
  readonly #calls: Map<string, InFlightEntry>
  readonly #runId: string

  constructor (calls: Map<string, InFlightEntry>, call: StageCall) {
    this.#calls = calls
    this.#runId = call.runId
    this.call = call
    this.older = calls.get(call.runId)
  }

  /** The call closed (StageCall calls it): the other calls with its run id stay. */
  leave (): void {
    if (this.call === undefined) return
    this.call = undefined
    const head = this.#calls.get(this.#runId)
    if (head === this) {
      if (this.older === undefined) this.#calls.delete(this.#runId)
      else this.#calls.set(this.#runId, this.older)
      return
    }
    for (let entry = head; entry !== undefined; entry = entry.older) {
      if (entry.older === this) {
        entry.older = this.older
        return
      }
    }
  }
}

/**
 * This replica's `/v4` HTTP calls in flight, by run id, so that a cancel finds any of them,
 * plain calls included. Only a call that passed its route and auth checks is added (invoke-pipeline.ts):
 * a refused request, or a `_runs` request, never shadows a call's run id. A plain call costs one
 * small entry, one Map set and one delete.
 */
export class CallsByRunId {
  readonly #calls = new Map<string, InFlightEntry>()

  /** Holds `call` until it closes (a call that outlives its caller: until its app request ends). */
  add (call: StageCall): void {
    const entry = new InFlightEntry(this.#calls, call)
    this.#calls.set(call.runId, entry)
    call.inFlight = entry
  }

  /** The newest call in flight here with that run id in that app (`caller` given: of that caller), undefined: none, or already answered. */
  find (scope: CancelScope, runId: string, caller?: string): StageCall | undefined {
    for (const call of this.#inScope(scope, runId, caller)) return call
    return undefined
  }

  /**
   * Cancels every call in flight here with that run id in that app: a wait ends, an app request
   * is cut, and the caller gets 499 `{"message": "run canceled"}` (a begun stream: an error
   * event). `caller` given: only that caller's calls (RUN_ACCESS=caller). True when one was found.
   */
  cancel (scope: CancelScope, runId: string, caller?: string): boolean {
    const found = [...this.#inScope(scope, runId, caller)] // taken first: an abort makes its call leave the chain
    for (const call of found) {
      const reason = new RunCanceledError()
      call.abort(reason)
      if (!call.forwarded) call.answer(reason)
    }
    return found.length > 0
  }

  /** The calls in flight here with that run id in that app (of `caller`, when given), newest first. */
  * #inScope (scope: CancelScope, runId: string, caller: string | undefined): Generator<StageCall> {
    for (let entry = this.#calls.get(runId); entry !== undefined; entry = entry.older) {
      const call = entry.call
      if (call !== undefined && inScope(call, scope) && (caller === undefined || call.caller === caller)) yield call
    }
  }

  /**
   * The end of the drain: every call still at the app without its caller (a recorded run: its
   * caller left, or its `Prefer: wait` ran out) is cut and ends `503 replica stopped`, its end
   * written while the run store is still open. How many were cut.
   */
  stopOutliving (): number {
    let stopped = 0
    for (const head of [...this.#calls.values()]) {
      for (let entry: InFlightEntry | undefined = head; entry !== undefined; entry = entry.older) {
        if (entry.call?.outliving !== true) continue
        entry.call.abort(new ReplicaStoppedError())
        stopped++
      }
    }
    return stopped
  }
}

/** Still to be answered (or answered for its key alone), and of the app the cancel names. */
const inScope = (call: StageCall, scope: CancelScope): boolean =>
  !(call.settled && !call.outliving) && call.route.projectId === scope.projectId && call.route.appName === scope.appName
