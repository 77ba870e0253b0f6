import { EventBeyondLastError, RunFinishedError, RunIdTakenError, RunNotAsyncError, RunNotFoundError } from '../../../errors.ts'
import { canceledRecord, finishedRecord, isFinished, pastAttempt, queuedRecord, startedRecord } from '../../run-record.ts'
import type { KeyClaims } from '../key-claims.ts'
import type { RunRecords } from '../run-records.ts'
import type { KeyAnswer, NewDelivery, RunEventItem, RunOutcome, RunRecord, RunScope, RunView, TakenRun, WebhookStatus } from '../../run-data.ts'
import { countsAttempts, retryAttempt } from './redis-attempts.ts'
import { guard, type RedisContext, ScopeKeys } from './redis-context.ts'
import { endDeliveryId, heldEndDelivery, holdDelivery } from './redis-deliveries.ts'
import { RunEventWriter } from './redis-event-writer.ts'
import { RECORDED_RUN_GRACE_SECONDS } from './redis-key-claims.ts'
import { requestJson } from './redis-run-request.ts'
import type { FieldsOf } from './redis-named-script.ts'
import type { TAKE, TakeOutcome } from './redis-queue-scripts.ts'
import { FINISH_RECORDED, MARK_FOLLOWED, OPEN_RUN, WEBHOOK_STATE } from './redis-scripts.ts'

/**
 * The runs' records in Redis: hashes written by compare-and-set (Lua script), events in a stream
 * per run; followers and cancels hear of changes through pub/sub.
 */
export class RedisRecords implements RunRecords {
  readonly #ctx: RedisContext
  /** Where a recorded sync call's answer is kept as it ends. */
  readonly #keys: KeyClaims
  /** The runs whose events are on their way, by scope and run id. */
  readonly #writers = new Map<string, RunEventWriter>()

  constructor (ctx: RedisContext, keys: KeyClaims) {
    this.#ctx = ctx
    this.#keys = keys
  }

  async get (scope: RunScope, runId: string): Promise<RunView> {
    const [view] = await this.#ctx.read(new ScopeKeys(scope), runId)
    return view
  }

  async cancel (scope: RunScope, runId: string): Promise<RunView> {
    const keys = new ScopeKeys(scope)
    for (;;) {
      const [view, raw, entry] = await this.#ctx.read(keys, runId)
      if (!view.async) throw new RunNotAsyncError()
      if (isFinished(view.record)) throw new RunFinishedError()
      const canceled = canceledRecord(view.record, Date.now())
      const changed = await this.#ctx.transition(keys, runId, raw, canceled.record, { result: canceled.resultJson, entry, done: true })
      if (!changed) continue
      if (view.record.status === 'running') await this.#ctx.publishOn(keys.cancel, runId)
      return { record: canceled.record, resultJson: canceled.resultJson, async: true }
    }
  }

  async open (run: TakenRun): Promise<TakenRun> {
    const ctx = this.#ctx
    const keys = new ScopeKeys(run.scope)
    const record = run.runningJson ?? JSON.stringify(run.running)
    // its request kept for a next attempt only when attempts are counted (the run is never queued again otherwise)
    const kept = run.attempt !== undefined && countsAttempts(ctx)
    const entry = await guard(OPEN_RUN.call(ctx.redis, {
      run: keys.run(run.runId), index: keys.runs, queue: keys.queue,
      record, owner: ctx.consumer, webhook: run.webhook === undefined ? '' : JSON.stringify(run.webhook),
      ttlSeconds: ctx.settings.retentionSeconds + RECORDED_RUN_GRACE_SECONDS, runId: run.runId, createdAtMs: run.createdAt,
      request: kept ? requestJson(run) : '', body: kept ? run.request.body ?? '' : '', urgency: run.urgency ?? '', caller: run.caller ?? '', sub: run.sub ?? ''
    }))
    if (entry === undefined) throw new RunIdTakenError()
    // held as a run this sidecar took: its heartbeat keeps the entry, a reaper finds it should this sidecar be lost
    ctx.lease.held.set(entry, keys.queue)
    ctx.known.set(entry, record)
    return { ...run, entry }
  }

  appendEvent (run: TakenRun, n: number, data: string): void {
    const key = writerKey(run)
    let writer = this.#writers.get(key)
    if (writer === undefined) {
      writer = new RunEventWriter(this.#ctx, run, () => { this.#writers.delete(key) })
      this.#writers.set(key, writer)
    }
    writer.add(n, data)
  }

  /**
   * As RunRecords.finish; with `take` (RedisQueue.endAndTake), the next run is taken for the slot
   * the run leaves in the same step as its end, when the end is one step (the record as this
   * sidecar started it, no webhook): TAKE's reply goes to `take.taken`.
   */
  async finish (run: TakenRun, outcome: RunOutcome, keep?: KeyAnswer, deliveryOf?: (view: RunView) => NewDelivery, take?: TakeAlong): Promise<RunView> {
    const ctx = this.#ctx
    const keys = new ScopeKeys(run.scope)
    await this.#writers.get(writerKey(run))?.flushed() // its events before its end, as readers get them
    if (run.running !== undefined) {
      // a recorded sync call: its record is as written with its key's claim unless something
      // changed it (nothing can: it cannot be canceled), so no read first; its answer goes with it
      const finished = finishedRecord(run.running, outcome)
      const done: RunView = { record: finished, resultJson: outcome.resultJson, async: false }
      if (keep === undefined) {
        const old = run.runningJson ?? JSON.stringify(run.running)
        // a call whose Prefer: wait ran out has its queue entry (open): acknowledged with its end
        if (await ctx.transition(keys, run.runId, old, finished, { result: outcome.resultJson, entry: run.entry, done: true })) {
          ctx.lease.held.delete(run.entry)
          ctx.known.delete(run.entry)
          return done
        }
      } else {
        const slot = keys.slot(keep.slot)
        ctx.lease.claims.delete(slot)
        const { answer } = keep
        if (await guard(FINISH_RECORDED.call(ctx.redis, {
          claims: keys.claims, index: keys.runs, run: keys.run(run.runId), events: keys.events(run.runId), slot,
          owner: ctx.consumer, newRecord: JSON.stringify(finished), result: outcome.resultJson, ttlSeconds: ctx.settings.retentionSeconds,
          liveChannel: keys.live(run.runId), runId: run.runId, status: answer.status, contentType: answer.contentType ?? '', body: answer.body,
          answerTtlMs: ctx.settings.retentionSeconds * 1000, indexCutoffMs: ctx.indexCutoff()
        }))) return done
      }
    }
    if (keep !== undefined) await this.#keys.keepAnswer(run.scope, keep.slot, run.runId, keep.answer)
    const known = run.entry === '' ? undefined : ctx.known.get(run.entry)
    if (known !== undefined) {
      // the record as this sidecar started it: unless a cancel (or a takeover) changed it since, the end is one step
      ctx.known.delete(run.entry)
      const ended = await this.#end(keys, run, known, finishedRecord(JSON.parse(known) as RunRecord, outcome), outcome, true, deliveryOf, take)
      if (ended !== undefined) return ended
    }
    for (;;) {
      const [view, raw, , owner] = await ctx.readOrMissing(keys, run.runId)
      if (view === undefined) return await this.#vanished(keys, run, outcome)
      const { status } = view.record
      // fencing: this attempt was interrupted (its sidecar taken for lost) and the run queued again, or run again
      if (pastAttempt(view.record, run.attempt)) {
        ctx.lease.held.delete(run.entry)
        return { ...view, endedElsewhere: true }
      }
      // its start lost in a failover (the record queued again, its entry still this sidecar's): it did run, here
      const lostStart = status === 'queued' && owner === ''
      const endedAlready = status !== 'running' && !lostStart // finished or canceled
      if (endedAlready && status !== 'canceled' && owner === ctx.consumer) {
        // this end written already: its reply was lost (a timeout, a dropped connection, a primary
        // killed after it wrote and passed it on) and the end tried again: it is this run's end, and
        // the delivery written with it is this sidecar's to send
        ctx.lease.held.delete(run.entry)
        const delivery = deliveryOf === undefined ? undefined : await heldEndDelivery(ctx, deliveryOf(view))
        return delivery === undefined ? view : { ...view, delivery }
      }
      if (endedAlready || (status === 'running' && owner !== ctx.consumer)) {
        ctx.lease.held.delete(run.entry) // acknowledged by whoever ended it
        // a cancel came first (this sidecar reports it), or another sidecar took this one for lost and ended or ran the run (that stands)
        return status === 'canceled' ? view : { ...view, endedElsewhere: true }
      }
      const running = lostStart ? startedRecord(view.record, run.createdAt, outcome.completedAt - outcome.runTimeMs, run.attempt) : view.record
      const ended = await this.#end(keys, run, raw, finishedRecord(running, outcome), outcome, view.async, deliveryOf)
      if (ended !== undefined) return ended
    }
  }

  /** The end written (compare-and-set against `old`), with its webhook's delivery when asked: undefined when the record had changed. */
  async #end (keys: ScopeKeys, run: TakenRun, old: string, finished: RunRecord, outcome: RunOutcome, async: boolean,
    deliveryOf: ((view: RunView) => NewDelivery) | undefined, take?: TakeAlong): Promise<RunView | undefined> {
    const ctx = this.#ctx
    const view: RunView = { record: finished, resultJson: outcome.resultJson, async }
    const extra = { result: outcome.resultJson, entry: run.entry, done: true, owner: ctx.consumer }
    let ended: RunView | undefined
    if (deliveryOf === undefined && take !== undefined) {
      const taken = await ctx.transitionAndTake(keys, run.runId, old, finished, extra, take.fields).catch((error: unknown) => { take.cut(); throw error })
      if (taken !== undefined) take.taken(taken)
      ended = taken === undefined ? undefined : view
    } else if (deliveryOf === undefined) {
      ended = await ctx.transition(keys, run.runId, old, finished, extra) ? view : undefined
    } else {
      const writing = holdDelivery(ctx, deliveryOf(view), endDeliveryId(run.runId))
      const entry = await ctx.transitionAndHold(keys, run.runId, old, finished, extra, writing.fields)
      ended = entry === undefined ? undefined : { ...view, delivery: writing.held(entry) }
    }
    if (ended === undefined) return undefined
    ctx.lease.held.delete(run.entry)
    if (run.entry !== '') ctx.lease.ended.set(run.entry, { keys, runId: run.runId, record: finished, resultJson: outcome.resultJson })
    return ended
  }

  async retry (run: TakenRun, outcome: RunOutcome): Promise<boolean> {
    const ctx = this.#ctx
    const keys = new ScopeKeys(run.scope)
    const reason = outcome.interrupted
    if (reason === undefined) return false
    await this.#writers.get(writerKey(run))?.flushed() // its events before its retry event
    const known = run.entry === '' ? undefined : ctx.known.get(run.entry)
    const attempt = { keys, runId: run.runId, entry: run.entry, reason, at: outcome.completedAt, lostBy: ctx.consumer }
    // the record as this sidecar started it: unless a cancel (or a takeover) changed it since, one step
    if (known !== undefined && await retryAttempt(ctx, { ...attempt, raw: known, record: JSON.parse(known) as RunRecord })) return true
    const [view, raw, , owner] = await ctx.readOrMissing(keys, run.runId)
    if (view?.record.status !== 'running' || owner !== ctx.consumer || pastAttempt(view.record, run.attempt)) return false
    return await retryAttempt(ctx, { ...attempt, raw, record: JSON.parse(raw) as RunRecord })
  }

  /**
   * A run whose record is gone while it ran (a Redis restarted empty, an eviction): its end is
   * still reported (its webhook sent, from what this sidecar holds), and the loss told.
   */
  async #vanished (keys: ScopeKeys, run: TakenRun, outcome: RunOutcome): Promise<RunView> {
    this.#ctx.lease.held.delete(run.entry)
    await this.#ctx.forget(keys, run.entry).catch(() => {})
    this.#ctx.listener?.truncated?.(run.scope, run.runId, 'its record, lost by the run store (restarted empty or evicting keys); its webhook is still sent')
    return { record: finishedRecord(queuedRecord(run), outcome), resultJson: outcome.resultJson, async: true }
  }

  async webhookDone (scope: RunScope, runId: string, status: WebhookStatus, attempts: number): Promise<void> {
    const changed = await guard(WEBHOOK_STATE.call(this.#ctx.redis, { run: new ScopeKeys(scope).run(runId), status, attempts }))
    if (!changed) throw new RunNotFoundError()
  }

  async follow (scope: RunScope, runId: string, after: number, signal: AbortSignal): Promise<AsyncIterable<RunEventItem>> {
    const { follow } = this.#ctx
    const keys = new ScopeKeys(scope)
    await this.#ctx.read(keys, runId) // 404 before any event
    const last = await follow.lastEvent(keys.events(runId))
    if (after > last) throw new EventBeyondLastError(after, last)
    // subscribed before the first read of the events: nothing appended meanwhile is missed
    const listening = await follow.listen(keys.live(runId), signal)
    // its end is told on the channel from now on (an end before this is read by the follower)
    await guard(MARK_FOLLOWED.call(this.#ctx.redis, { run: keys.run(runId) })).catch((error: unknown) => { listening.stop(); throw error })
    return follow.events(listening, keys.events(runId), after + 1, async () => await this.#finishedView(keys, runId))
  }

  async #finishedView (keys: ScopeKeys, runId: string): Promise<RunView | undefined> {
    const [view] = await this.#ctx.readOrMissing(keys, runId)
    return view === undefined || isFinished(view.record) ? view : undefined
  }
}

const writerKey = (run: TakenRun): string => `${run.scope.projectId}/${run.scope.appName}/${run.runId}`

/** TAKE sent along with a run's end (END_AND_TAKE): its fields, where its answer goes, and what a lost reply does. */
export interface TakeAlong {
  readonly fields: FieldsOf<typeof TAKE>
  readonly taken: (take: TakeOutcome) => void
  readonly cut: () => void
}
