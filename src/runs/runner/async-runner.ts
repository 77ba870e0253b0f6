import { logRunEnd, thisReplica } from '../run-end-log.ts'
import pRetry from 'p-retry'
import { QueueExpiredError, ReplicaStoppedError, RunCanceledError, RunStoreUnavailableError, SIDECAR_INTERNAL, SidecarError } from '../../errors.ts'
import { LAST_URGENCY, type Release } from '../../lifecycle/concurrency-gate.ts'
import type { RunStoreListener } from '../store/run-store.ts'
import type { RunQueue } from '../store/run-queue.ts'
import type { NewDelivery, RunOutcome, RunScope, RunView, TakenRun } from '../run-data.ts'
import { runWebhookBody } from '../../webhook/result-capture.ts'
import type { WebhookTarget } from '../../webhook/webhook-endpoint.ts'
import { withTraceContext } from '../../call/forward-headers.ts'
import { storedHeader, storedTrace } from '../stored-headers.ts'
import { recordWebhookEnd } from '../webhooks/webhook-end.ts'
import { canceledOutcome, RunRelay } from './run-relay.ts'
import { armRunDeadline, expiredAtStart } from './run-time-limits.ts'
import { retriedAttempt, withAttempt } from './run-attempts.ts'
import { whileUnavailable } from '../while-unavailable.ts'
import type { AsyncRunnerDeps } from './async-runner-deps.ts'

/** Most async runs one sidecar runs at once when REPLICA_CONCURRENCY sets no limit: the rest stay queued for other replicas. */
export const UNLIMITED_PARALLEL = 100

/** How long cut runs may take to record their end after the grace period. */
const CUT_SETTLE_MS = 5000

/** The error of a run failed by ASYNC_QUEUE_TTL_SECONDS (a queued run's other time limit is its Cancel-After). */
const QUEUE_EXPIRED = new QueueExpiredError().message

/**
 * Runs queued async runs: takes the next one (by urgency, fair across callers, where the store
 * keeps them) whenever a slot is free that no waiting call goes before, sends its request to the
 * app, records its events and result, and sends its webhook. Acts on cancels, lost runs and the
 * store's outages as the store reports them.
 */
export class AsyncRunner implements RunStoreListener {
  readonly #deps: AsyncRunnerDeps
  readonly #maxParallel: number
  /** Started runs, by scope and run id, for cancels. */
  readonly #running = new Map<string, RunRelay>()
  /** Runs taken (a take starts a run) that are not at the app yet, by key: true once a cancel came for one meanwhile. */
  readonly #starting = new Map<string, boolean>()
  /** Runs taken and not yet ended. */
  #active = 0
  /** Runs at the app (their slot not free yet). */
  #atApp = 0
  readonly #loop = new AbortController()
  #wake: Array<() => void> = []
  #stopped: Promise<void> | undefined
  readonly #nextUrgency: () => number | undefined

  readonly #replica: string

  constructor (deps: AsyncRunnerDeps) {
    this.#deps = deps
    this.#replica = thisReplica(deps.replica)
    this.#maxParallel = deps.replicaConcurrency > 0 ? deps.replicaConcurrency : UNLIMITED_PARALLEL
    const { queue } = deps.store
    this.#nextUrgency = () => queue.nextUrgency?.()
    queue.capCallers?.(caller => deps.gate.capped(caller), () => deps.gate.cappedCallers())
    deps.gate.onCallerFreed(caller => {
      queue.callerFreed?.(caller)
      this.#changed()
    })
  }

  /** Runs taken and not yet ended. */
  get active (): number { return this.#active }

  /** Starts taking runs. */
  start (): void {
    this.#stopped = this.#takeLoop(this.#loop.signal)
  }

  canceled (scope: RunScope, runId: string): void {
    const key = runKey(scope, runId)
    if (this.#starting.has(key)) this.#starting.set(key, true)
    this.#running.get(key)?.abort(new RunCanceledError())
  }

  lost (run: TakenRun, view: RunView): void {
    this.#deps.runsTotal.labels(view.record.status).inc()
    logRunEnd(this.#deps.logger, run.scope, view, view.ranBy ?? 'a lost replica')
    this.#sendWebhook(run, view)
  }

  expired (run: TakenRun, view: RunView): void {
    this.#deps.runsTotal.labels(view.record.status).inc()
    this.#deps.cancels.labels(view.record.error?.message === QUEUE_EXPIRED ? 'queue_ttl' : 'deadline').inc()
    logRunEnd(this.#deps.logger, run.scope, view, 'none (never run)')
    this.#sendWebhook(run, view)
  }

  availability (available: boolean): void {
    if (available) this.#changed()
  }

  /**
   * SIGTERM. With a shared store: no new run is taken, so runs still queued stay for the other
   * replicas. In memory: queued runs go on running like in-flight
   * calls. Either way the runs under way get until `graceOver`; then they fail with "replica
   * stopped" (a shared store queues one with attempts left again). True when nothing was cut.
   */
  async drain (graceOver: Promise<unknown>): Promise<boolean> {
    let over = false
    void graceOver.then(() => { over = true; this.#changed() })
    if (this.#deps.store.queue.shared) this.#stopTaking()
    while (!over) {
      if (this.active === 0 && (this.#deps.store.queue.shared || await this.#queueEmpty())) break
      await this.#change()
    }
    this.#stopTaking()
    if (this.#running.size === 0) return true
    this.#deps.logger.warn({ runs: this.#running.size }, 'grace period over; cutting the async runs left (failed, or queued again with attempts left)')
    for (const relay of this.#running.values()) relay.abort(new ReplicaStoppedError())
    const settled = AbortSignal.timeout(CUT_SETTLE_MS)
    while (this.active > 0 && !settled.aborted) await this.#change(settled)
    return false
  }

  /** Stops taking runs and waits for the loop to end. */
  async close (): Promise<void> {
    this.#stopTaking()
    await this.#stopped
  }

  /** No run is taken any more (a take under way gives its run back to the queue, for the other replicas). */
  #stopTaking (): void {
    if (this.#loop.signal.aborted) return
    this.#loop.abort(new Error('sidecar stopping'))
  }

  async #takeLoop (signal: AbortSignal): Promise<void> {
    const { logger, gate, store } = this.#deps
    let failing = false
    while (!signal.aborted) {
      try {
        // with REPLICA_CONCURRENCY the gate's slots are the limit, and the runner waits in the gate
        // like a call (a freed slot goes to the more urgent of a waiting call and the next run);
        // without, the gate has none and the runner keeps its own
        if (this.#deps.replicaConcurrency === 0) while (this.#atApp >= this.#maxParallel && !signal.aborted) await this.#change(signal)
        await gate.whenSlotFree(signal, this.#nextUrgency)
        // the slot went meanwhile (to the run taken with another's end, in the same turn): wait again
        if (!gate.slotFreeForRun) continue
        // the slot kept for a queued run that is gone since (canceled, expired) goes to the waiting calls
        if (this.#nextUrgency() === undefined) gate.reconsider()
        // taken only now, for a free slot: a run is never committed to a busy one, where a more
        // urgent run, or another caller's turn, queued meanwhile would have to wait behind it
        const run = await store.queue.take(signal)
        failing = false
        // given back (a call took the slot meanwhile; its caller got capped): the next take finds
        // it in its place, or passes it over while its caller is capped (both stores do)
        this.#execute(run)
      } catch (error) {
        if (signal.aborted) return
        if (!failing) logger.warn({ err: error }, error instanceof RunStoreUnavailableError ? 'async runs wait for the run store' : 'taking an async run failed')
        failing = true
        await Promise.race([this.#change(signal), delay(1000)])
      }
    }
  }

  /**
   * Runs a taken run in a free slot; when it has none after all (a call took the slot while the run
   * was taken, or goes first, or the run's caller got capped meanwhile), the run goes back to its
   * place in the queue, for the next free slot here or elsewhere.
   */
  #execute (taken: TakenRun): void {
    const release = this.#deps.gate.tryAcquireRun(taken.urgency ?? LAST_URGENCY, taken.caller)
    if (release === undefined) void this.#deps.store.queue.release(taken).catch(() => {})
    else void this.#run(taken, release)
  }

  async #run (taken: TakenRun, slot: Release): Promise<void> {
    const { store, logger, inflight } = this.#deps
    let release: Release | undefined = slot
    /** The run as taken, then as started (a shared store may read its request only as it starts). */
    let run = taken
    this.#active++
    this.#atApp++
    inflight.begin()
    this.#starting.set(runKey(taken.scope, taken.runId), false)
    /** The run leaves the app: its slot is free for the next call or run. */
    const leaveApp = (): void => {
      if (release === undefined) return
      release()
      release = undefined
      this.#atApp--
      this.#changed()
    }
    try {
      let started: TakenRun | undefined
      try {
        started = await whileUnavailable(async () => await store.queue.start(taken, Date.now()))
      } catch (error) {
        await store.queue.release(taken).catch(() => {}) // not started: it stays queued, for whichever replica reaches the store
        throw error
      }
      if (started === undefined) return // canceled or expired while it waited
      run = started
      const outcome = expiredAtStart(run, this.#deps.queueTtlSeconds) ?? await this.#dispatch(run)
      // interrupted with attempts left: queued again, for any replica (its slot freed below)
      if (await retriedAttempt(store.records, run, outcome, this.#deps.maxAttempts)) return
      const endAndTake = this.#endAndTake(run)
      if (endAndTake === undefined) leaveApp() // the next run starts while this one's end is written
      let view: RunView
      let next: TakenRun | undefined
      try {
        if (endAndTake !== undefined) {
          // the next run taken for this slot in the same step as the end: no round trip between them
          ({ view, next } = await whileUnavailable(async () => await endAndTake(run, outcome)))
        } else {
          // the webhook written down with the end (a shared store): no end is left without its delivery
          const target = store.deliveries === undefined ? undefined : run.webhook
          const deliveryOf = target === undefined ? undefined : (ended: RunView): NewDelivery => this.#deliveryOf(run, target, ended)
          view = await whileUnavailable(async () => await store.records.finish(run, outcome, undefined, deliveryOf))
        }
      } catch (error) {
        if (!(error instanceof RunStoreUnavailableError)) throw error
        this.#finishLater(run, outcome)
        return
      }
      this.#ended(run, view)
      if (next !== undefined) {
        // the slot passes to it: freed and taken again in one turn (no call waits for it: see #endAndTake)
        leaveApp()
        this.#execute(next)
      }
    } catch (error) {
      if (error instanceof SidecarError) logger.error({ err: error, runId: run.runId }, 'async run could not be recorded')
      else this.#failInternally(run, error)
    } finally {
      this.#starting.delete(runKey(taken.scope, taken.runId))
      leaveApp()
      this.#active--
      inflight.end()
      this.#changed()
    }
  }

  /**
   * How this run's end takes the next run along (a shared store's endAndTake), when it may: the
   * store knows of a run queued, no call waits for a slot (a waiting call goes before a run, and
   * gets the slot as this run leaves it), the runner is not stopping, and the end is one step (no
   * webhook to write down with it). Else undefined: the slot is freed before the end is written.
   */
  #endAndTake (run: TakenRun): RunQueue['endAndTake'] {
    const { queue } = this.#deps.store
    if (queue.endAndTake === undefined || run.webhook !== undefined || this.#loop.signal.aborted) return undefined
    if (this.#deps.gate.waiting > 0 || queue.nextUrgency?.() === undefined) return undefined
    return queue.endAndTake.bind(queue)
  }

  /**
   * A run whose end could not be written in the store's outage: written (and its webhook sent)
   * once the store answers again, without holding a slot meanwhile. Should this sidecar stop
   * first, its entry is no longer kept claimed and another replica fails it "replica lost".
   */
  #finishLater (run: TakenRun, outcome: RunOutcome): void {
    const { store, logger } = this.#deps
    logger.warn({ runId: run.runId }, 'async run ended; its end is written once the run store answers')
    pRetry(async () => await store.records.finish(run, outcome), {
      retries: Infinity, minTimeout: 1000, maxTimeout: 5000, signal: this.#loop.signal,
      shouldRetry: ({ error }) => error instanceof RunStoreUnavailableError
    }).then(view => { this.#ended(run, view) }, (error: unknown) => { logger.error({ err: error, runId: run.runId }, 'async run could not be recorded') })
  }

  /**
   * A run's end as the store kept it: counted, and its webhook sent; unless another replica took
   * this one for lost and ended the run first (a long pause): that end stands and its webhook was sent there.
   */
  #ended (run: TakenRun, view: RunView): void {
    if (view.endedElsewhere === true) {
      this.#deps.logger.warn({ runId: run.runId, status: view.record.status }, 'async run ended by another replica meanwhile (this one was taken for lost): its answer here is not recorded, no webhook sent')
      return
    }
    this.#deps.runsTotal.labels(view.record.status).inc()
    logRunEnd(this.#deps.logger, run.scope, view, this.#replica)
    this.#sendWebhook(run, view)
  }

  /** An exception nobody expected (a store write, a bug): reported, and the run ends failed if the store lets it. */
  #failInternally (run: TakenRun, error: unknown): void {
    const { store, reportInternal } = this.#deps
    reportInternal(error, { runId: run.runId })
    const outcome: RunOutcome = { status: 'failed', statusCode: SIDECAR_INTERNAL.status, resultJson: SIDECAR_INTERNAL.body(), runTimeMs: 0, error: SIDECAR_INTERNAL.message, completedAt: Date.now() }
    void Promise.resolve().then(async () => await store.records.finish(run, outcome)).then(view => { this.#ended(run, view) }, () => {}) // the store itself is what failed: the run stays as it can be read
  }

  async #dispatch (run: TakenRun): Promise<RunOutcome> {
    const key = runKey(run.scope, run.runId)
    // canceled between its take and now: it never reaches the app (its record says canceled already)
    if (this.#starting.get(key) === true) return canceledOutcome()
    const { store, app, reportInternal, cancelAtApp } = this.#deps
    const { request } = run
    // its events follow those of the attempts before it
    const firstEvent = run.firstEvent ?? 0
    let broken = false
    const relay: RunRelay = new RunRelay({
      method: request.method,
      accept: storedHeader(request.headers, 'accept'),
      maxResultBytes: this.#deps.maxResultBytes,
      maxEventBytes: this.#deps.maxEventBytes,
      appUrl: this.#deps.appUrl,
      cancelAtApp: cancelAtApp === undefined ? undefined : () => { cancelAtApp(run.runId) },
      onEvent: (n, data) => {
        // a later attempt of the run taken here meanwhile (this one was taken for lost): its events are not this one's
        if (broken || this.#running.get(key) !== relay) return
        try {
          store.records.appendEvent(run, firstEvent + n, data)
        } catch (error) {
          // a store write that throws fails this run (500), never the others nor the process
          broken = true
          reportInternal(error, { runId: run.runId })
          relay.abort(SIDECAR_INTERNAL)
        }
      }
    })
    this.#running.set(key, relay)
    const deadline = armRunDeadline(run, this.#deps.deadlineSeconds, reason => {
      this.#deps.cancels.labels('deadline').inc()
      relay.abort(reason)
    })
    const span = this.#deps.tracer?.startClient(request.method, storedTrace(request.headers), {
      'http.request.method': request.method, run_id: run.runId
    })
    app.dispatch({ method: request.method, path: request.path, headers: withAttempt(withTraceContext(request.headers, span?.context), run.attempt), body: request.body }, relay)
    try {
      const outcome = await relay.outcome
      span?.end(outcome.statusCode, outcome.status === 'succeeded' ? undefined : outcome.error)
      return outcome
    } finally {
      deadline?.clear()
      if (this.#running.get(key) === relay) this.#running.delete(key)
    }
  }

  /** The run's webhook for its final record (written down with the end, when the store holds deliveries). */
  #deliveryOf (run: TakenRun, target: WebhookTarget, view: RunView): NewDelivery {
    const record = view.record
    const body = runWebhookBody(run.runId, record.status_code ?? 0, view.resultJson ?? 'null', record.run_time_ms ?? 0,
      record.completed_at ?? new Date().toISOString(), this.#deps.webhookMaxBodyBytes)
    return { scope: run.scope, runId: run.runId, target, body, trace: storedTrace(run.request.headers) }
  }

  #sendWebhook (run: TakenRun, view: RunView): void {
    if (run.webhook === undefined) return
    const { store, logger, webhooks } = this.#deps
    const delivery = view.delivery ?? this.#deliveryOf(run, run.webhook, view)
    const job = { ...delivery, onEnd: recordWebhookEnd(store.records, run.scope, run.runId, logger) }
    if (view.delivery !== undefined) webhooks.submitHeld(job, view.delivery)
    else webhooks.submit(job)
  }

  async #queueEmpty (): Promise<boolean> {
    try {
      return await this.#deps.store.queue.queuedCount() === 0
    } catch {
      return true
    }
  }

  #changed (): void {
    const waiters = this.#wake
    this.#wake = []
    for (const wake of waiters) wake()
  }

  /** Resolves at the next run taken or ended, availability change, or abort. */
  #change (signal?: AbortSignal): Promise<void> {
    // an abort listener added to a signal aborted already never fires: a stopped loop would wait on
    if (signal?.aborted === true) return Promise.resolve()
    return new Promise(resolve => {
      const done = (): void => {
        signal?.removeEventListener('abort', done)
        resolve()
      }
      this.#wake.push(done)
      signal?.addEventListener('abort', done, { once: true })
    })
  }
}

const runKey = (scope: RunScope, runId: string): string => `${scope.projectId}/${scope.appName}/${runId}`

const delay = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, ms).unref()) }
