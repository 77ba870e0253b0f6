import type { KeptAnswer, KeyClaim, KeyEntry, RunScope, TakenRun } from '../run-data.ts'

/** Idempotency-Key slots. Every method rejects with RunStoreUnavailableError while the backend cannot be reached. */
export interface KeyClaims {
  /**
   * Claims an Idempotency-Key's slot (idempotency-key.ts) for `claim`, atomically across every
   * sidecar sharing the store: undefined when this request now holds it (it runs), else what holds
   * it. A claim is held until its answer is kept (then for RUN_RETENTION_SECONDS) or it is dropped;
   * in Redis, also until its sidecar is lost (the claim is a lease renewed by the heartbeat).
   * With `run` (a sync call's recordedRun), the same step records it as a run already running (never queued;
   * not async, so the store cannot cancel it (its sidecar ends it, canceled too); its events and end are recorded as an async run's, through
   * that handle): one round trip for both. Rejects with RunIdTakenError (the key
   * is not claimed then).
   */
  claim: (scope: RunScope, slot: string, claim: KeyClaim, run?: TakenRun) => Promise<KeyEntry | undefined>
  /** Keeps the answer of the claim of `runId` for its repeats (RUN_RETENTION_SECONDS from now); nothing when the slot is not its. */
  keepAnswer: (scope: RunScope, slot: string, runId: string, answer: KeptAnswer) => Promise<void>
  /**
   * Frees the slot the claim of `runId` holds (its request failed before the app, or its caller
   * left): a retry runs. `forgetRun`: the run recorded with the claim never reached the app, and
   * its record goes too (it was never run).
   */
  drop: (scope: RunScope, slot: string, runId: string, forgetRun?: boolean) => Promise<void>
}
