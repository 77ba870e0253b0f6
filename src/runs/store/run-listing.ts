import type { RunRecord, RunScope, RunStatus } from '../run-data.ts'

/** A place in an app's list of runs (newest first: by `created_at` in ms, then by run id, both descending). */
export interface ListPosition {
  /** The run's `created_at`, epoch ms. */
  readonly createdAt: number
  readonly runId: string
}

/** One page asked of the list. */
export interface ListRequest {
  /** The statuses listed; undefined: all. */
  readonly statuses: readonly RunStatus[] | undefined
  /** The page starts after this run (the last of the page before); undefined: at the newest. */
  readonly after: ListPosition | undefined
  /** Most records in the page. */
  readonly limit: number
  /** Only the runs this `sub` submitted (RUN_ACCESS=caller; a run whose submitter is not known is nobody's); undefined: every run. */
  readonly sub?: string | undefined
}

/** One page of the list: records without their results, and where the next page starts (undefined: nothing follows). */
export interface RunPage {
  readonly records: readonly RunRecord[]
  readonly next: ListPosition | undefined
}

/**
 * A listed run's place in Priority and fair share (docs/runs.md): its urgency (0–7) and its caller
 * (the token's `sub`, or the address). A run that kept none (a recorded sync call) has urgency 3 and caller ''.
 */
export interface RunPriority {
  readonly urgency: number
  readonly caller: string
}

/**
 * An app's recorded runs as a whole: listed, and its queued ones canceled at once. Every method
 * rejects with RunStoreUnavailableError while the backend cannot be reached.
 */
export interface RunListing {
  /**
   * The app's recorded runs (async and recorded sync calls), newest first; expired ones are gone.
   * A page with `request.sub` holds `limit` runs of that sub's whenever as many follow (never fewer because others' runs came between).
   */
  list: (scope: RunScope, request: ListRequest) => Promise<RunPage>
  /** Cancels every queued async run of the app (`sub` given: of that sub's alone), each as a cancel would (never run, no webhook); resolves with how many. */
  cancelQueued: (scope: RunScope, sub?: string) => Promise<number>
  /** The urgency and caller of each of these runs, in their order (one gone meanwhile: as if it kept none); the console's runs list. */
  priorities: (scope: RunScope, runIds: readonly string[]) => Promise<RunPriority[]>
}
