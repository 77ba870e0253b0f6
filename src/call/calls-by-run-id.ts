import { RunCanceledError } from '../errors.ts'
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
 */
class InFlightEntry {
  call: StageCall | undefined
  readonly #calls: Map<string, InFlightEntry>

  constructor (calls: Map<string, InFlightEntry>, call: StageCall) {
    this.#calls = calls
    this.call = call
  }

  /** The call closed (StageCall calls it): a later call with its run id stays. */
  leave (): void {
    const call = this.call
    if (call === undefined) return
    if (this.#calls.get(call.runId) === this) this.#calls.delete(call.runId)
    this.call = undefined
  }
}

/**
 * This replica's `/v4` HTTP calls in flight, by run id, so that a cancel finds any of them,
 * plain calls included. A plain call costs one small entry, one Map set and one delete; two calls
 * sent with the same X-Request-Id: the later one is the one found.
 */
export class CallsByRunId {
  readonly #calls = new Map<string, InFlightEntry>()

  /** Holds `call` until it closes (a call that outlives its caller: until its app request ends). */
  add (call: StageCall): void {
    const entry = new InFlightEntry(this.#calls, call)
    this.#calls.set(call.runId, entry)
    call.inFlight = entry
  }

  /** The call in flight here with that run id in that app (undefined: none, or already answered). */
  find (scope: CancelScope, runId: string): StageCall | undefined {
    const call = this.#calls.get(runId)?.call
    if (call === undefined || (call.settled && !call.outliving)) return undefined
    // a call not routed yet names no app: any app's cancel reaches it
    const route = call.route as StageCall['route'] | undefined
    if (route !== undefined && (route.projectId !== scope.projectId || route.appName !== scope.appName)) return undefined
    return call
  }

  /**
   * Cancels the call in flight here with that run id: a wait ends, an app request is cut, and the
   * caller gets 499 `{"message": "run canceled"}` (a begun stream: an error event). True when one was found.
   */
  cancel (scope: CancelScope, runId: string): boolean {
    const call = this.find(scope, runId)
    if (call === undefined) return false
    const reason = new RunCanceledError()
    call.abort(reason)
    if (!call.forwarded) call.answer(reason)
    return true
  }
}
