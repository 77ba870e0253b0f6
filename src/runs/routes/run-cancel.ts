import { RunFinishedError, RunNotAsyncError, RunNotFoundError } from '../../errors.ts'
import { canceledRecord, isFinished, recordJson } from '../run-record.ts'
import type { RunStore } from '../store/run-store.ts'
import type { RunScope, RunStatus, RunView } from '../run-data.ts'
import { sendJson } from '../../shared/http-answers.ts'
import type { CancelCause, LabelledCounter } from '../../shared/metric-contracts.ts'
import type { CallsByRunId } from '../../call/calls-by-run-id.ts'
import type { StageCall } from '../../call/stage-call.ts'
import { readable, type RunAccessRule, type RunRoute, subOf } from './run-route.ts'
import { logRunEnd } from '../run-end-log.ts'
import type { Logger } from 'pino'

export interface RunCancelDeps extends RunAccessRule {
  readonly store: RunStore
  readonly runsTotal: LabelledCounter<RunStatus>
  /** This replica's calls in flight by run id (a plain call has no record: only they know it). */
  readonly calls: CallsByRunId
  /** sidecar_cancels_total: each cancel this route made counts as `request`. */
  readonly cancels: LabelledCounter<CancelCause>
  /** Where a queued run this route canceled writes its run-end line. */
  readonly logger?: Logger
}

/** How long a cancel of a recorded sync call waits for its end to be written (its sidecar writes it), and how often it looks. */
const END_WAIT_MS = 1000
const END_POLL_MS = 20
const delay = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, ms)) }

/**
 * `POST …/_runs/{id}/cancel`: any run still in progress, on whichever replica holds it. 200 with
 * the record (a plain call: `{"run_id", "status": "canceled"}`), 409 finished, 404 nowhere.
 */
export function createRunCancel (deps: RunCancelDeps): (call: StageCall, route: RunRoute) => Promise<void> {
  const { store, calls } = deps

  /**
   * A plain call in flight here is canceled at once (no store asked); else the store cancels an
   * async run, names a recorded sync call (canceled where it runs, its end written there) or
   * none: then the call may be a plain one on another replica.
   */
  async function cancel (call: StageCall, route: RunRoute): Promise<void> {
    const { scope, runId } = route
    // RUN_ACCESS=caller: only the caller's own calls and runs; another's is answered as one never recorded
    const sub = subOf(deps, call)
    if (calls.find(scope, runId, sub)?.recording === undefined && calls.cancel(scope, runId, sub)) return canceledPlain(call, runId)
    let view: RunView
    try {
      if (sub !== undefined) readable(await store.records.get(scope, runId), sub)
      view = await store.records.cancel(scope, runId)
    } catch (error) {
      if (error instanceof RunNotFoundError && await cancelCall(scope, runId, sub)) return canceledPlain(call, runId)
      if (!(error instanceof RunNotAsyncError)) throw error
      view = await cancelRecordedCall(scope, runId, sub)
    }
    deps.cancels.labels('request').inc()
    // a run canceled before it started is counted here; a running one by the sidecar that ran it
    if (view.record.started_at === undefined) {
      deps.runsTotal.labels('canceled').inc()
      if (deps.logger !== undefined) logRunEnd(deps.logger, scope, view, 'none (never run)')
    }
    if (!call.settled) sendJson(call.out, 200, recordJson(view), { 'x-request-id': call.runId })
  }

  /** A call in flight here, else on another replica sharing the store (`sub` given: that caller's): true when one was canceled. */
  async function cancelCall (scope: RunScope, runId: string, sub: string | undefined): Promise<boolean> {
    return calls.cancel(scope, runId, sub) || await store.cancelCall(scope, runId, sub)
  }

  /**
   * A recorded sync call (its Idempotency-Key) still running: canceled where it runs, which writes
   * its end; answered with that end once written (a GET after the answer reads it), else as it will be.
   */
  async function cancelRecordedCall (scope: RunScope, runId: string, sub: string | undefined): Promise<RunView> {
    const running = await store.records.get(scope, runId)
    // not in flight anywhere: it ended meanwhile
    if (isFinished(running.record) || !await cancelCall(scope, runId, sub)) throw new RunFinishedError()
    const until = Date.now() + END_WAIT_MS
    while (Date.now() < until) {
      await delay(END_POLL_MS)
      const view = await store.records.get(scope, runId).catch(() => undefined)
      if (view === undefined) break // a call that never reached the app is forgotten with its key
      if (isFinished(view.record)) return view
    }
    const canceled = canceledRecord(running.record, Date.now())
    return { record: canceled.record, resultJson: canceled.resultJson, async: false }
  }

  /** A plain call has no record kept: its cancel's answer says only that. */
  function canceledPlain (call: StageCall, runId: string): void {
    deps.cancels.labels('request').inc()
    if (!call.settled) sendJson(call.out, 200, JSON.stringify({ run_id: runId, status: 'canceled' }), { 'x-request-id': call.runId })
  }

  return cancel
}
