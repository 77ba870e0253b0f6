import { performance } from 'node:perf_hooks'
import type { ConcurrencyGate, Release } from '../lifecycle/concurrency-gate.ts'
import { roundedMs } from '../shared/run-result.ts'
import type { CallRecord } from './call-record.ts'

/** What the gate stage needs of a call (an HttpCall, an UpgradeCall, a stage's StageCall). */
export type GateCall = Pick<CallRecord, 'settled' | 'signal' | 'fairCaller' | 'urgency' | 'waited' | 'onClose'>

/**
 * The gate stage (503 queue full): a concurrency slot, at once when one is free, else after a
 * wait (by urgency, fair across callers) that the call's abort (caller gone, deadline; or `signal`)
 * ends; the call is told how long it waited (Server-Timing, sidecar_queue_duration_seconds). The slot is freed when the call closes; the
 * release is returned for a caller that can free it sooner.
 */
export function takeSlot (gate: ConcurrencyGate, call: GateCall, signal?: AbortSignal): Release | Promise<Release> {
  if (call.settled) throw call.signal.reason ?? new Error('call already answered')
  const free = gate.tryAcquire(call.fairCaller) // the fast path allocates no promise
  if (free !== undefined) {
    call.waited(0)
    return hold(call, free)
  }
  const since = performance.now()
  // the call's signal only now: an AbortController per call on the fast path was ~3% of a plain call's CPU, and its garbage more
  return gate.acquire(signal ?? call.signal, call.urgency, call.fairCaller).then(release => {
    call.waited(roundedMs(performance.now() - since))
    return hold(call, release)
  })
}

function hold (call: GateCall, release: Release): Release {
  call.onClose(release)
  return release
}
