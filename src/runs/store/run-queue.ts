import type { NewRun, RunOutcome, RunView, TakenRun } from '../run-data.ts'

/**
 * The queue of async runs: submitted by any sidecar, taken by the one with a free slot. Every
 * method rejects with RunStoreUnavailableError while the backend cannot be reached.
 */
export interface RunQueue {
  /** Shared by every sidecar with the same RUN_STORE_URL: on SIGTERM queued runs stay for the others. */
  readonly shared: boolean
  /** Records a queued async run and queues it. Rejects with AsyncQueueFullError, RunIdTakenError. */
  submit: (run: NewRun) => Promise<RunView>
  /**
   * The next queued run of the served scope(s) (by urgency, then fairly across callers), once there
   * is one, started (queued → running, in the same step): its taker holds a free slot for it.
   * Rejects with `signal.reason` when aborted.
   */
  take: (signal: AbortSignal) => Promise<TakenRun>
  /**
   * The run as it goes to the app: `run`, started by its take (or, a run a shared store took over
   * from a lost sidecar, taken `unread`: queued → running now, its request and webhook read as it
   * starts); undefined when it was canceled or taken over meanwhile (it must not run).
   */
  start: (run: TakenRun, startedAt: number) => Promise<TakenRun | undefined>
  /** Gives a taken run that has not gone to the app back to the queue, queued as before its take (a slot lost to a call, SIGTERM), for other sidecars. */
  release: (run: TakenRun) => Promise<void>
  /**
   * A run's end (as RunRecords.finish without a key or webhook) and the next run for the slot it
   * leaves, taken (started) in the same step: no round trip between them. `next` undefined: none
   * taken (none queued, or the end was not one step). A shared store only.
   */
  endAndTake?: (run: TakenRun, outcome: RunOutcome) => Promise<{ view: RunView, next: TakenRun | undefined }>
  /** The urgency of the run take() would give now, as far as the queue knows without asking (a shared store: as last seen); undefined when none waits. */
  nextUrgency?: () => number | undefined
  /**
   * Runs of callers `capped` (CALLER_MAX_INFLIGHT here; `all` lists them) are passed over, in their
   * place, until callerFreed: they stay queued for replicas that can start them.
   */
  capCallers?: (capped: (caller: string) => boolean, all: () => readonly string[]) => void
  /** A capped caller's call ended: its runs may be taken again. */
  callerFreed?: (caller: string) => void
  /** Async runs waiting for their turn in the served scope(s) by urgency, index 0–7 (sidecar_async_queued_runs_by_urgency). */
  queuedByUrgency: () => Promise<readonly number[]>
  /** Async runs waiting in the served scope(s) (sidecar_async_queued_runs). */
  queuedCount: () => Promise<number>
  /** Async runs taken and not ended in the served scope(s), on any replica sharing the store (sidecar_async_running_runs). */
  runningCount: () => Promise<number>
}
