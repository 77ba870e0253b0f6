import type { KeyAnswer, NewDelivery, RunEventItem, RunOutcome, RunScope, RunView, TakenRun, WebhookStatus } from '../run-data.ts'

/**
 * The runs' records, events and results. Every method that reaches the backend rejects with
 * RunStoreUnavailableError while it cannot be reached; the ones naming a run reject with
 * RunNotFoundError when the scope holds no such run.
 */
export interface RunRecords {
  /** The run's record. */
  get: (scope: RunScope, runId: string) => Promise<RunView>
  /**
   * Cancels an async run: a queued one never runs; a running one is marked canceled at once and
   * its owner is told (listener.canceled, on whichever sidecar runs it). Resolves with the record.
   * Rejects with RunFinishedError, RunNotAsyncError.
   */
  cancel: (scope: RunScope, runId: string) => Promise<RunView>
  /**
   * Records a sync call as a running async run as it goes on (its `Prefer: wait` ran out):
   * `run.running`, owned by this sidecar, ended by `finish` like a keyed call's, or, interrupted,
   * queued again by `retry` (its request kept when `run.attempt` is set: attempts are counted).
   * Resolves with the run as opened (a shared store: with its queue entry, held like a run taken,
   * which another sidecar finds should this one be lost). Rejects with RunIdTakenError.
   */
  open: (run: TakenRun) => Promise<TakenRun>
  /** Appends event `n` (0, 1, 2, … in order) of a running run; never waits, never throws. */
  appendEvent: (run: TakenRun, n: number, data: string) => void
  /**
   * running → its final status; resolves with the final record (a cancel that came first wins).
   * `keep`: a recorded sync call's answer, kept for its key's repeats in the same step (as keepAnswer).
   * `deliveryOf`: the run's webhook for its final record: with a store that holds deliveries, written
   * down in the same step as the end (the view's `delivery`), so that no end is left without it.
   */
  finish: (run: TakenRun, outcome: RunOutcome, keep?: KeyAnswer, deliveryOf?: (view: RunView) => NewDelivery) => Promise<RunView>
  /**
   * A shared store: an attempt of a running run (`run`, as taken) was interrupted at `outcome`'s
   * completedAt (`outcome.interrupted` says why): its events so far written, it goes back to the
   * queue, in its place, for its next attempt, with a retry event; no webhook. False when its record
   * had changed meanwhile (a cancel, a takeover): then it ends as `finish` would end it.
   */
  retry?: (run: TakenRun, outcome: RunOutcome) => Promise<boolean>
  /** The webhook's delivery ended (or is pending, attempts 0): recorded; the secret is dropped when it ended. */
  webhookDone: (scope: RunScope, runId: string, status: WebhookStatus, attempts: number) => Promise<void>
  /**
   * The run's events after event `after` (-1: from the first), then live ones, then `done`.
   * Rejects with EventBeyondLastError when `after` is past the run's last event. A reader that
   * does not pull is never buffered without bound: it catches up from the kept events.
   */
  follow: (scope: RunScope, runId: string, after: number, signal: AbortSignal) => Promise<AsyncIterable<RunEventItem>>
}
