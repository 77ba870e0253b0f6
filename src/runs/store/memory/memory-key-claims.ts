import { LRUCache } from 'lru-cache'
import type { KeyClaims } from '../key-claims.ts'
import type { KeptAnswer, KeyClaim, KeyEntry, RunRecord, RunScope, TakenRun } from '../../run-data.ts'
import { type MemoryRuns, scopeKeyOf } from './memory-runs.ts'

/** Kept answers of Idempotency-Keys, at most this many bytes (then the oldest go first; a claim still running is never dropped). */
const ANSWER_BYTES = 64 * 1024 * 1024

/** Idempotency-Key slots in this process's memory. */
export class MemoryKeyClaims implements KeyClaims {
  readonly #runs: MemoryRuns
  /** Idempotency-Key slots whose first request still runs (held until it answers or frees them), and the answered ones. */
  readonly #claims = new Map<string, KeyEntry>()
  readonly #answers: LRUCache<string, KeyEntry>

  constructor (runs: MemoryRuns) {
    this.#runs = runs
    this.#answers = new LRUCache<string, KeyEntry>({
      ttl: runs.settings.retentionSeconds * 1000,
      maxSize: ANSWER_BYTES,
      sizeCalculation: entry => 256 + (entry.answer?.body.length ?? 0)
    })
  }

  async claim (scope: RunScope, slot: string, claim: KeyClaim, run?: TakenRun): Promise<KeyEntry | undefined> {
    const key = `${scopeKeyOf(scope)}/${slot}`
    const running = this.#claims.get(key)
    if (running !== undefined) return running
    const answered = this.#answers.get(key)
    if (answered !== undefined) return answered
    if (run !== undefined) this.#record(run)
    this.#claims.set(key, { ...claim, answer: undefined })
    return undefined
  }

  async keepAnswer (scope: RunScope, slot: string, runId: string, answer: KeptAnswer): Promise<void> {
    const key = `${scopeKeyOf(scope)}/${slot}`
    const claim = this.#claims.get(key)
    if (claim?.runId !== runId) return
    this.#claims.delete(key)
    this.#answers.set(key, { runId, digest: claim.digest, async: claim.async, answer })
  }

  async drop (scope: RunScope, slot: string, runId: string, forgetRun = false): Promise<void> {
    const key = `${scopeKeyOf(scope)}/${slot}`
    if (this.#claims.get(key)?.runId !== runId) return
    this.#claims.delete(key)
    const run = this.#runs.live.get(`${scopeKeyOf(scope)}/${runId}`)
    if (forgetRun && run !== undefined && !run.async) this.#runs.live.delete(run.key)
  }

  /** A sync call with an Idempotency-Key, recorded running as its key is claimed. */
  #record (run: TakenRun): void {
    this.#runs.refuseTaken(run)
    this.#runs.add(run, run.running as RunRecord, false)
  }
}
