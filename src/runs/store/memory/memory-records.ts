import { EventBeyondLastError, RunFinishedError, RunNotAsyncError, RunNotFoundError } from '../../../errors.ts'
import { canceledRecord, finishedRecord, isFinished, withWebhook } from '../../run-record.ts'
import type { KeyClaims } from '../key-claims.ts'
import type { RunRecords } from '../run-records.ts'
import type { KeyAnswer, RunEventItem, RunOutcome, RunRecord, RunScope, RunView, TakenRun, WebhookStatus } from '../../run-data.ts'
import { changeOf, keyOf, type MemoryRun, type MemoryRuns, viewOf, wake } from './memory-runs.ts'

/** The runs' records, events and results in this process's memory. */
export class MemoryRecords implements RunRecords {
  readonly #runs: MemoryRuns
  /** Where a recorded sync call's answer is kept as it ends. */
  readonly #keys: KeyClaims

  constructor (runs: MemoryRuns, keys: KeyClaims) {
    this.#runs = runs
    this.#keys = keys
  }

  async get (scope: RunScope, runId: string): Promise<RunView> {
    return viewOf(this.#runs.find(scope, runId))
  }

  async cancel (scope: RunScope, runId: string): Promise<RunView> {
    const run = this.#runs.find(scope, runId)
    if (!run.async) throw new RunNotAsyncError()
    if (isFinished(run.record)) throw new RunFinishedError()
    const wasRunning = run.record.status === 'running'
    if (!wasRunning) this.#runs.countWaiting(run, -1) // taken or not, it waited
    const canceled = canceledRecord(run.record, Date.now())
    run.record = canceled.record
    run.resultJson = canceled.resultJson
    this.#runs.retire(run)
    if (wasRunning) this.#runs.listener?.canceled(scope, runId)
    return viewOf(run)
  }

  async open (run: TakenRun): Promise<TakenRun> {
    this.#runs.refuseTaken(run)
    this.#runs.add(run, run.running as RunRecord, false)
    return run
  }

  appendEvent (taken: TakenRun, n: number, data: string): void {
    const run = this.#runs.live.get(keyOf(taken))
    if (run === undefined || run.record.status !== 'running' || n !== run.dropped + run.events.length) return
    this.#runs.keepEvent(run, data)
    wake(run)
  }

  async finish (taken: TakenRun, outcome: RunOutcome, keep?: KeyAnswer): Promise<RunView> {
    if (keep !== undefined) await this.#keys.keepAnswer(taken.scope, keep.slot, taken.runId, keep.answer)
    const key = keyOf(taken)
    const run = this.#runs.live.get(key) ?? this.#runs.finished.get(key)
    if (run === undefined) throw new RunNotFoundError()
    if (run.record.status === 'running') {
      run.record = finishedRecord(run.record, outcome)
      run.resultJson = outcome.resultJson
      this.#runs.retire(run)
    }
    return viewOf(run)
  }

  async webhookDone (scope: RunScope, runId: string, status: WebhookStatus, attempts: number): Promise<void> {
    const run = this.#runs.find(scope, runId)
    run.record = withWebhook(run.record, { status, attempts })
    if (status !== 'pending') run.webhook = undefined
  }

  async follow (scope: RunScope, runId: string, after: number, signal: AbortSignal): Promise<AsyncIterable<RunEventItem>> {
    const run = this.#runs.find(scope, runId)
    const last = run.dropped + run.events.length - 1
    if (after > last) throw new EventBeyondLastError(after, last)
    return this.#events(run, after + 1, signal)
  }

  async * #events (run: MemoryRun, from: number, signal: AbortSignal): AsyncGenerator<RunEventItem> {
    let next = from
    while (!signal.aborted && !this.#runs.closed) {
      const first = this.#runs.firstKept(run)
      if (next < first) {
        yield { type: 'gap', first }
        next = first
        continue
      }
      if (next < run.dropped + run.events.length) {
        yield { type: 'event', n: next, data: run.events[next - run.dropped] as string }
        next++
        continue
      }
      if (isFinished(run.record)) {
        yield { type: 'done', view: viewOf(run) }
        return
      }
      await changeOf(run, signal)
    }
  }
}
