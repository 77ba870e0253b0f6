import type { ConcurrencyGate, Release } from '../lifecycle/concurrency-gate.ts'
import type { RecordedCall } from './call-record.ts'

/**
 * The gate stage (503 queue full): a concurrency slot, at once when one is free, else after a
 * wait that the call's abort (caller gone, deadline) ends. The slot is freed when the call closes;
 * the release is returned for a caller that can free it sooner.
 */
export async function takeSlot (gate: ConcurrencyGate, call: RecordedCall): Promise<Release> {
  if (call.settled) throw call.signal.reason ?? new Error('call already answered')
  const release = gate.tryAcquire() ?? await gate.acquire(call.signal)
  call.onClose(release)
  return release
}
