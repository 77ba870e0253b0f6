import { RunStoreUnavailableError } from '../../../src/errors.ts'
import type { RunRoute } from '../../../src/runs/routes/run-route.ts'
import type { RunOutcome, RunScope, RunView, TakenRun } from '../../../src/runs/run-data.ts'
import { MemoryRunStore } from '../../../src/runs/store/memory/memory-run-store.ts'
import type { RunListing } from '../../../src/runs/store/run-listing.ts'
import type { RunRecords } from '../../../src/runs/store/run-records.ts'
import type { RunStore, RunStoreSettings } from '../../../src/runs/store/run-store.ts'
import type { StreamMetrics } from '../../../src/shared/metric-contracts.ts'
import type { CallerGot, FakeCall } from '../../helpers/fake-call.ts'

// What the unit tests of src/runs/routes/ share: a real memory run store filled run by run, the
// route a `_runs` request names, stores that fail where a test says, and stream metrics that count.

interface Teardown { teardown: (fn: () => void | Promise<void>) => void }

export const SCOPE: RunScope = { projectId: 'p1', appName: 'a1' }
export const OTHER_SCOPE: RunScope = { projectId: 'p1', appName: 'a2' }

const SETTINGS: RunStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 64 * 1024 * 1024, queueDepth: 100, queueMaxBytes: 1024 * 1024, scope: undefined }

/** A real memory run store, closed with the test. */
export function memoryStore (t: Teardown, settings: Partial<RunStoreSettings> = {}): MemoryRunStore {
  const store = new MemoryRunStore({ ...SETTINGS, ...settings })
  t.teardown(async () => { await store.close() })
  return store
}

/** The route a `…/_runs[/{id}[/{action}]]` request names (as matchRunRoute would find it). */
export function runRoute (action: RunRoute['action'], runId = '', query = '', scope: RunScope = SCOPE): RunRoute {
  return { scope, runId, action, query }
}

/** `time` as a record writes it. */
export const iso = (time: number): string => new Date(time).toISOString()

/** Submits an async run: queued. */
export async function queuedRun (store: RunStore, runId: string, createdAt = Date.now(), scope: RunScope = SCOPE): Promise<RunView> {
  return await store.queue.submit({ scope, runId, request: { method: 'POST', path: '/work', headers: [], body: Buffer.from('{}') }, webhook: undefined, createdAt })
}

/** Submits an async run, takes it and starts it at `createdAt + 5`: running (nothing else may be queued in the store). */
export async function runningRun (store: RunStore, runId: string, createdAt = Date.now(), scope: RunScope = SCOPE): Promise<TakenRun> {
  await queuedRun(store, runId, createdAt, scope)
  const taken = await store.queue.take(AbortSignal.timeout(5000))
  if (taken.runId !== runId) throw new Error(`took ${taken.runId}, not ${runId}: another run was queued`)
  const started = await store.queue.start(taken, createdAt + 5)
  if (started === undefined) throw new Error(`${runId} did not start`)
  return started
}

/** How runningRun's runs end by default: 200 after 7 ms, at `createdAt + 12`. */
export function succeeded (run: TakenRun, resultJson = '{"ok":true}'): RunOutcome {
  return { status: 'succeeded', statusCode: 200, resultJson, runTimeMs: 7, error: undefined, completedAt: run.createdAt + 12 }
}

/** A run that ran and succeeded (with `events` produced first). */
export async function finishedRun (store: RunStore, runId: string, createdAt = Date.now(), events: readonly string[] = [], scope: RunScope = SCOPE): Promise<RunView> {
  const run = await runningRun(store, runId, createdAt, scope)
  events.forEach((data, n) => { store.records.appendEvent(run, n, data) })
  return await store.records.finish(run, succeeded(run))
}

/** The record of a run that runningRun started at `createdAt` and that ended as `succeeded` says (in the SPEC's field order); `result` null: without it. */
export function succeededJson (runId: string, createdAt: number, result: string | null = '{"ok":true}'): string {
  return `{"run_id":"${runId}","status":"succeeded","created_at":"${iso(createdAt)}","started_at":"${iso(createdAt + 5)}",` +
    `"completed_at":"${iso(createdAt + 12)}","queue_time_ms":5,"run_time_ms":7,"status_code":200${result === null ? '' : `,"result":${result}`}}`
}

/** A queued run's record. */
export const queuedJson = (runId: string, createdAt: number): string => `{"run_id":"${runId}","status":"queued","created_at":"${iso(createdAt)}"}`

/** Rejects as a store that cannot be reached does. */
export async function unavailable (): Promise<never> {
  throw new RunStoreUnavailableError('test store down')
}

/** What a store's parts may be replaced with. */
export interface StoreParts {
  readonly records?: Partial<RunRecords>
  readonly listing?: Partial<RunListing>
  readonly cancelCall?: RunStore['cancelCall']
}

/** `store`, with the parts given replaced (a failing method, a blocked one): the rest is the real store's. */
export function storeWith (store: RunStore, parts: StoreParts): RunStore {
  const records: RunRecords = {
    get: async (scope, runId) => await store.records.get(scope, runId),
    cancel: async (scope, runId) => await store.records.cancel(scope, runId),
    open: async run => await store.records.open(run),
    appendEvent: (run, n, data) => { store.records.appendEvent(run, n, data) },
    finish: async (run, outcome, keep, deliveryOf) => await store.records.finish(run, outcome, keep, deliveryOf),
    webhookDone: async (scope, runId, status, attempts) => { await store.records.webhookDone(scope, runId, status, attempts) },
    follow: async (scope, runId, after, signal) => await store.records.follow(scope, runId, after, signal),
    ...parts.records
  }
  const listing: RunListing = {
    list: async (scope, request) => await store.listing.list(scope, request),
    cancelQueued: async (scope, sub) => await store.listing.cancelQueued(scope, sub),
    priorities: async (scope, runIds) => await store.listing.priorities(scope, runIds),
    ...parts.listing
  }
  return {
    backend: store.backend,
    available: store.available,
    queue: store.queue,
    records,
    keys: store.keys,
    listing,
    deliveries: store.deliveries,
    cancelCall: parts.cancelCall ?? (async (scope, runId, caller) => await store.cancelCall(scope, runId, caller)),
    listen: listener => { store.listen(listener) },
    close: async () => { await store.close() }
  }
}

/** A store none of whose `_runs` parts can be reached: each rejects with RunStoreUnavailableError. */
export function unreachableStore (store: RunStore): RunStore {
  return storeWith(store, {
    records: { get: unavailable, cancel: unavailable, follow: unavailable },
    listing: { list: unavailable, cancelQueued: unavailable },
    cancelCall: unavailable
  })
}

/** A store that fails the test if it is asked anything: each `_runs` part rejects with a plain Error (answered 500). */
export function untouchableStore (store: RunStore): RunStore {
  const asked = async (): Promise<never> => { throw new Error('the store was asked') }
  return storeWith(store, { records: { get: asked, cancel: asked, follow: asked }, listing: { list: asked, cancelQueued: asked }, cancelCall: asked })
}

/** StreamMetrics that count, and say when their counts reach a state. */
export interface CountingStreamMetrics extends StreamMetrics {
  /** Streams open now. */
  readonly open: number
  /** Events sent in all. */
  readonly sent: number
  /** Resolves once `reached(this)` holds (at once when it does now). */
  until: (reached: (metrics: CountingStreamMetrics) => boolean) => Promise<void>
}

export function countingStreamMetrics (): CountingStreamMetrics {
  let open = 0
  let sent = 0
  let waiters: Array<{ reached: (metrics: CountingStreamMetrics) => boolean, resolve: () => void }> = []
  const changed = (): void => {
    const ready = waiters.filter(waiter => waiter.reached(metrics))
    waiters = waiters.filter(waiter => !ready.includes(waiter))
    for (const waiter of ready) waiter.resolve()
  }
  const metrics: CountingStreamMetrics = {
    get open () { return open },
    get sent () { return sent },
    sseStreams: {
      inc: (value = 1) => { open += value; changed() },
      dec: (value = 1) => { open -= value; changed() }
    },
    sseEvents: { inc: (value = 1) => { sent += value; changed() } },
    until: async reached => {
      if (reached(metrics)) return
      await new Promise<void>(resolve => { waiters.push({ reached, resolve }) })
    }
  }
  return metrics
}

/**
 * A stage's refusal as the pipeline answers it: `pending` must reject; the call is answered with
 * that error (as invoke-pipeline's catch does) and the test gets both.
 */
export async function refusal (c: FakeCall, pending: Promise<unknown>): Promise<{ readonly error: unknown, readonly got: CallerGot | undefined }> {
  const error = await pending.then(() => new Error('the stage did not refuse the call'), (refused: unknown) => refused)
  c.answer(error)
  return { error, got: await c.got }
}

/** A promise and its resolve, to hold a store's answer until the test lets it go. */
export function held<T> (): { readonly promise: Promise<T>, readonly resolve: (value: T) => void } {
  let resolve: (value: T) => void = () => {}
  const promise = new Promise<T>(done => { resolve = done })
  return { promise, resolve }
}
