import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { pino } from 'pino'
import type { Test } from 'tap'
import type { Pool as PoolType } from 'undici'
import { ConcurrencyGate } from '../../../src/lifecycle/concurrency-gate.ts'
import { InflightTracker } from '../../../src/lifecycle/inflight-tracker.ts'
import type { HeldDelivery, NewRun, RunEventItem, RunScope, RunStatus, RunView, StoredRequest, TakenRun } from '../../../src/runs/run-data.ts'
import { AsyncRunner } from '../../../src/runs/runner/async-runner.ts'
import type { RunWebhooks } from '../../../src/runs/runner/async-runner-deps.ts'
import { openRunStore } from '../../../src/runs/store/open-run-store.ts'
import type { RunQueue } from '../../../src/runs/store/run-queue.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import type { CancelCause, LabelledCounter } from '../../../src/shared/metric-contracts.ts'
import type { Tracer } from '../../../src/shared/trace-contracts.ts'
import { Pool } from '../../../src/shared/undici-core.ts'
import type { WebhookJob } from '../../../src/webhook/webhook-delivery.ts'
import { countingCounter } from '../../helpers/fake-call.ts'
import { patient } from '../../helpers/timing.ts'

// The async runner's parts built by hand, as src/runs/open-runs.ts and src/sidecar/sidecar.ts wire
// them, around a real memory run store, a real gate and a real app on loopback that the test drives.

export const scope: RunScope = { projectId: 'proj', appName: 'app' }
export const logger = pino({ level: 'silent' })

/** Every wait in these tests is bounded by this unless told otherwise. */
export const WAIT_MS = 5000

/** `promise`, or a rejection naming `what` once `ms` (times PATIENCE) pass first. */
export async function within<T> (promise: Promise<T>, what: string, ms = WAIT_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => { reject(new Error(`not within ${patient(ms)} ms: ${what}`)) }, patient(ms))
  })
  try {
    return await Promise.race([promise, late])
  } finally {
    clearTimeout(timer)
  }
}

/** Lets every promise already settled run its reactions (no time passes: microtasks all run before it). */
export async function settle (): Promise<void> {
  await new Promise(resolve => setImmediate(resolve))
}

/** One request as the app got it, whole, and its response for the test to write. */
export interface AppRequest {
  readonly method: string
  readonly url: string
  readonly headers: IncomingHttpHeaders
  readonly rawHeaders: string[]
  readonly body: Buffer
  readonly req: IncomingMessage
  readonly res: ServerResponse
  /** Resolves when the connection closed before the answer was finished (the request was cut). */
  readonly cut: Promise<void>
  /** The request was cut (so far). */
  readonly wasCut: () => boolean
}

export interface TestApp {
  /** `http://127.0.0.1:<port>` */
  readonly origin: string
  readonly requests: AppRequest[]
  /** The n-th request (from 1), once it has arrived with its whole body. */
  arrived: (n: number, ms?: number) => Promise<AppRequest>
  /** Answers each request as it arrives; unset: requests are held for the test to answer. */
  answer: ((request: AppRequest) => void) | undefined
  /** Stops listening and cuts every connection (an app that dies). */
  close: () => Promise<void>
}

/** A node:http app on 127.0.0.1, port 0, closed at the test's end. */
export async function testApp (t: Test, answer?: (request: AppRequest) => void): Promise<TestApp> {
  const requests: AppRequest[] = []
  let waiters: Array<() => void> = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      let cut = false
      const cutPromise = new Promise<void>(resolve => {
        res.on('close', () => {
          if (res.writableFinished) return
          cut = true
          resolve()
        })
      })
      const request: AppRequest = {
        method: req.method ?? '', url: req.url ?? '', headers: req.headers, rawHeaders: req.rawHeaders,
        body: Buffer.concat(chunks), req, res, cut: cutPromise, wasCut: () => cut
      }
      requests.push(request)
      const wake = waiters
      waiters = []
      for (const resolve of wake) resolve()
      app.answer?.(request)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  let closed: Promise<void> | undefined
  const app: TestApp = {
    origin: `http://127.0.0.1:${port}`,
    requests,
    answer,
    arrived: async (n, ms = WAIT_MS) => await within((async () => {
      while (requests.length < n) await new Promise<void>(resolve => waiters.push(resolve))
      return requests[n - 1] as AppRequest
    })(), `request ${n} at the app`, ms),
    close: async () => {
      closed ??= new Promise<void>(resolve => {
        server.close(() => { resolve() })
        server.closeAllConnections()
      })
      await closed
    }
  }
  t.teardown(async () => { await app.close() })
  return app
}

/** An undici Pool to `origin`, as the sidecar makes its app's. */
export function appPool (t: Test, origin: string): PoolType {
  const pool = new Pool(origin, { keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 })
  t.teardown(async () => { await pool.destroy() })
  return pool
}

/** The address of a port nothing listens on (a server listened there, then closed). */
export async function deadOrigin (): Promise<string> {
  const server = createServer()
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  await new Promise<void>(resolve => server.close(() => { resolve() }))
  return `http://127.0.0.1:${port}`
}

export interface StoreSettings {
  /** RUN_MAX_ATTEMPTS as the store knows it (default 1). */
  readonly maxAttempts?: number
  readonly queueTtlSeconds?: number
  readonly maxEvents?: number
  readonly queueDepth?: number
}

/** The real memory run store, as RUN_STORE_URL unset opens it, closed at the test's end. */
export async function memoryStore (t: Test, settings: StoreSettings = {}): Promise<RunStore> {
  const store = await openRunStore(undefined, {
    retentionSeconds: 60,
    maxEvents: settings.maxEvents ?? 100,
    maxEventBytes: 1 << 20,
    queueDepth: settings.queueDepth ?? 1000,
    queueMaxBytes: 1 << 24,
    queueTtlSeconds: settings.queueTtlSeconds,
    maxAttempts: settings.maxAttempts,
    scope
  })
  t.teardown(async () => { await store.close() })
  return store
}

/**
 * The memory queue as a shared store presents itself (Redis's queue: `shared`, no nextUrgency,
 * no capped callers passed over): every call goes to the real memory queue.
 */
export function sharedView (queue: RunQueue): RunQueue {
  return {
    shared: true,
    submit: async run => await queue.submit(run),
    take: async signal => await queue.take(signal),
    start: async (run, startedAt) => await queue.start(run, startedAt),
    release: async run => { await queue.release(run) },
    nextUrgency: () => queue.nextUrgency?.(),
    capCallers: (capped, all) => { queue.capCallers?.(capped, all) },
    callerFreed: caller => { queue.callerFreed?.(caller) },
    queuedByUrgency: async () => await queue.queuedByUrgency(),
    queuedCount: async () => await queue.queuedCount(),
    runningCount: async () => await queue.runningCount()
  }
}

/** A store whose queue is `sharedView` of the memory store's; every other part the memory store's own. */
export function sharedStore (store: RunStore): RunStore {
  return {
    backend: store.backend,
    available: store.available,
    queue: sharedView(store.queue),
    records: store.records,
    keys: store.keys,
    listing: store.listing,
    deliveries: store.deliveries,
    cancelCall: async (runScope, runId) => await store.cancelCall(runScope, runId),
    listen: listener => { store.listen(listener) },
    close: async () => { await store.close() }
  }
}

export interface RunInput {
  readonly runId: string
  readonly method?: string
  readonly path?: string
  readonly headers?: readonly string[]
  readonly body?: Buffer | null
  readonly webhook?: NewRun['webhook']
  readonly createdAt?: number
  readonly urgency?: number
  readonly caller?: string
}

/** The run as submitted (POST /work, a JSON body, by default). */
export function newRun (input: RunInput): NewRun {
  const request: StoredRequest = {
    method: input.method ?? 'POST',
    path: input.path ?? '/work',
    headers: input.headers ?? ['content-type', 'application/json', 'x-request-id', input.runId],
    body: input.body === undefined ? Buffer.from('{"n":1}') : input.body
  }
  return {
    scope, runId: input.runId, request, webhook: input.webhook, createdAt: input.createdAt ?? Date.now(),
    ...(input.urgency === undefined ? {} : { urgency: input.urgency }),
    ...(input.caller === undefined ? {} : { caller: input.caller })
  }
}

export async function submit (store: RunStore, input: RunInput): Promise<RunView> {
  return await store.queue.submit(newRun(input))
}

/** Every item of the run's events from the first, through its `done` (bounded). */
export async function itemsOf (store: RunStore, runId: string, ms = WAIT_MS): Promise<RunEventItem[]> {
  const items: RunEventItem[] = []
  const signal = AbortSignal.timeout(ms)
  for await (const item of await store.records.follow(scope, runId, -1, signal)) {
    items.push(item)
    if (item.type === 'done') return items
  }
  throw new Error(`run ${runId} did not end within ${ms} ms`)
}

/** The run's record once it has ended (bounded). */
export async function ended (store: RunStore, runId: string, ms = WAIT_MS): Promise<RunView> {
  const items = await itemsOf(store, runId, ms)
  const done = items[items.length - 1] as RunEventItem & { type: 'done' }
  return done.view
}

/** Resolves once event `n` of the run is kept (bounded). */
export async function eventKept (store: RunStore, runId: string, n: number, ms = WAIT_MS): Promise<string> {
  const signal = AbortSignal.timeout(ms)
  for await (const item of await store.records.follow(scope, runId, -1, signal)) {
    if (item.type === 'event' && item.n === n) return item.data
    if (item.type === 'done') throw new Error(`run ${runId} ended before event ${n}`)
  }
  throw new Error(`event ${n} of ${runId} not kept within ${ms} ms`)
}

/** Webhooks the runner handed on, as DurableWebhooks would take them. */
export interface RecordedWebhooks extends RunWebhooks {
  readonly submitted: WebhookJob[]
  readonly held: Array<{ readonly job: WebhookJob, readonly held: HeldDelivery }>
  /** Resolves once `n` webhooks were submitted (bounded). */
  count: (n: number) => Promise<WebhookJob[]>
}

export function recordedWebhooks (): RecordedWebhooks {
  const submitted: WebhookJob[] = []
  const held: Array<{ job: WebhookJob, held: HeldDelivery }> = []
  let waiters: Array<() => void> = []
  const wake = (): void => {
    const all = waiters
    waiters = []
    for (const resolve of all) resolve()
  }
  return {
    submitted,
    held,
    submit: job => { submitted.push(job); wake(); return true },
    submitHeld: (job, delivery) => { held.push({ job, held: delivery }); wake() },
    count: async n => await within((async () => {
      while (submitted.length < n) await new Promise<void>(resolve => waiters.push(resolve))
      return submitted
    })(), `${n} webhooks submitted`)
  }
}

export interface KitOptions {
  /** REPLICA_CONCURRENCY (default 1): the gate's limit and the runner's. */
  readonly replicaConcurrency?: number
  /** CALLER_MAX_INFLIGHT (default 0). */
  readonly callerLimit?: number
  readonly deadlineSeconds?: number
  /** ASYNC_QUEUE_TTL_SECONDS as the runner knows it (default a day). */
  readonly queueTtlSeconds?: number
  readonly maxResultBytes?: number
  readonly maxEventBytes?: number
  readonly webhookMaxBodyBytes?: number
  readonly tracer?: Tracer
  /** APP_CANCEL_PATH set (default true): the run ids the runner asked to cancel at the app. */
  readonly cancelAtApp?: boolean
  /** RUN_MAX_ATTEMPTS as the runner knows it (default 1; the store has its own, in its settings). */
  readonly maxAttempts?: number
  /** Store to run from (default: a fresh memory store). */
  readonly store?: RunStore
  /** The app's origin (default: the test app's). */
  readonly origin?: string
  /** Open the gate (the app's first readiness) before starting (default true). */
  readonly open?: boolean
  /** Start taking runs at once (default true). */
  readonly start?: boolean
}

export interface RunnerKit {
  readonly runner: AsyncRunner
  readonly store: RunStore
  readonly gate: ConcurrencyGate
  readonly pool: PoolType
  readonly inflight: InflightTracker
  readonly runsTotal: LabelledCounter<RunStatus> & { readonly counts: Map<RunStatus, number> }
  readonly cancels: LabelledCounter<CancelCause> & { readonly counts: Map<CancelCause, number> }
  readonly webhooks: RecordedWebhooks
  readonly internalErrors: Array<{ readonly error: unknown, readonly fields: Record<string, unknown> | undefined }>
  readonly appCancels: string[]
  /** Slots the gate holds now, as its observer counts them. */
  readonly gateInflight: () => number
}

/** An AsyncRunner over its real parts, listening to its store as open-runs.ts wires it; closed at the test's end. */
export async function runnerKit (t: Test, app: TestApp | undefined, options: KitOptions = {}): Promise<RunnerKit> {
  const store = options.store ?? await memoryStore(t)
  const replicaConcurrency = options.replicaConcurrency ?? 1
  let inflightNow = 0
  const gate = new ConcurrencyGate(replicaConcurrency, 100, { inflight: delta => { inflightNow += delta }, queued: () => {} }, options.callerLimit ?? 0)
  const origin = options.origin ?? app?.origin
  if (origin === undefined) throw new Error('runnerKit needs an app or an origin')
  const pool = appPool(t, origin)
  const inflight = new InflightTracker()
  const runsTotal = countingCounter<RunStatus>()
  const cancels = countingCounter<CancelCause>()
  const webhooks = recordedWebhooks()
  const internalErrors: Array<{ error: unknown, fields: Record<string, unknown> | undefined }> = []
  const appCancels: string[] = []
  const runner = new AsyncRunner({
    store,
    gate,
    app: pool,
    appUrl: `${origin}/`,
    webhooks,
    webhookMaxBodyBytes: options.webhookMaxBodyBytes ?? 1 << 20,
    maxResultBytes: options.maxResultBytes ?? 1 << 20,
    maxEventBytes: options.maxEventBytes ?? 1 << 16,
    deadlineSeconds: options.deadlineSeconds ?? 0,
    queueTtlSeconds: options.queueTtlSeconds ?? 86_400,
    maxAttempts: options.maxAttempts ?? 1,
    replicaConcurrency,
    runsTotal,
    cancels,
    cancelAtApp: options.cancelAtApp === false ? undefined : runId => { appCancels.push(runId) },
    logger,
    reportInternal: (error, fields) => { internalErrors.push({ error, fields }) },
    inflight,
    tracer: options.tracer
  })
  store.listen({
    canceled: (runScope, runId) => { runner.canceled(runScope, runId) },
    lost: (run, view) => { runner.lost(run, view) },
    expired: (run, view) => { runner.expired(run, view) },
    availability: available => { runner.availability(available) }
  })
  if (options.open !== false) gate.open()
  if (options.start !== false) runner.start()
  // the app goes first: a run held there ends, so the runner's close does not wait on it
  t.teardown(async () => {
    await app?.close()
    await runner.close()
  })
  return { runner, store, gate, pool, inflight, runsTotal, cancels, webhooks, internalErrors, appCancels, gateInflight: () => inflightNow }
}

/** Holds one of the gate's slots as a sync call would (its caller `caller`); the release frees it. */
export async function holdSlot (gate: ConcurrencyGate, caller = 'sync-caller', urgency = 3): Promise<() => void> {
  return await within(gate.acquire(AbortSignal.timeout(patient(WAIT_MS)), urgency, caller), 'a slot for a call')
}

/** A taken run as the memory queue hands it out, for the parts that take one. */
export async function takenRun (store: RunStore, input: RunInput): Promise<TakenRun> {
  await submit(store, input)
  return await within(store.queue.take(AbortSignal.timeout(patient(WAIT_MS))), `take ${input.runId}`)
}

/** Writes `status` with `headers` and `body` and ends the app's answer. */
export function answer (request: AppRequest, status: number, body: string | Buffer, headers: Record<string, string> = { 'content-type': 'application/json' }): void {
  request.res.writeHead(status, headers).end(body)
}
