import { RunStoreUnavailableError } from '../../errors.ts'
import type { RunRecords } from '../store/run-records.ts'
import type { RunOutcome, TakenRun } from '../run-data.ts'
import { whileUnavailable } from '../while-unavailable.ts'

// An async run's attempts as the runner sees them (docs/runs.md, "Running on interruptible capacity").

const ATTEMPT_HEADER = 'x-run-attempt'

/**
 * The headers of an attempt's app request: `X-Run-Attempt: <n>` (RUN_MAX_ATTEMPTS above 1), in
 * place of any the caller sent; `headers` as they are when attempts are not counted.
 */
export function withAttempt (headers: string[], attempt: number | undefined): string[] {
  if (attempt === undefined) return headers
  const out: string[] = []
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i] as string
    if (name.length !== ATTEMPT_HEADER.length || name.toLowerCase() !== ATTEMPT_HEADER) out.push(name, headers[i + 1] as string)
  }
  out.push(ATTEMPT_HEADER, String(attempt))
  return out
}

/**
 * An interrupted attempt of a run with attempts left, with a store that queues runs again: put
 * back in the queue for its next attempt (true). False when it is not (its outcome stands: any
 * answer of the app, a deadline, a cancel, its last attempt, a memory store, a record changed
 * meanwhile, or a store that stays unreachable: its end is then written as it stands, once it answers).
 */
export async function retriedAttempt (records: RunRecords, run: TakenRun, outcome: RunOutcome, maxAttempts: number): Promise<boolean> {
  const { retry } = records
  if (outcome.interrupted === undefined || retry === undefined || run.attempt === undefined || run.attempt >= maxAttempts) return false
  try {
    return await whileUnavailable(async () => await retry.call(records, run, outcome))
  } catch (error) {
    if (error instanceof RunStoreUnavailableError) return false
    throw error
  }
}
