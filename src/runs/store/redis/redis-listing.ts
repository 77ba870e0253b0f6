import { CANCELED_MESSAGE, withWebhook } from '../../run-record.ts'
import { DEFAULT_URGENCY } from '../../../shared/fair-queue.ts'
import type { ListPosition, ListRequest, RunListing, RunPage, RunPriority } from '../run-listing.ts'
import type { RunRecord, RunScope, WebhookStatus } from '../../run-data.ts'
import { guard, type RedisContext, ScopeKeys } from './redis-context.ts'
import { CANCEL_QUEUED, LIST_OWN_RUNS, LIST_RUNS, type ListedRun } from './redis-list-scripts.ts'
import { RUN_STATUSES } from './redis-run-index.ts'

/** Queue entries one CANCEL_QUEUED goes through. */
const CANCEL_BATCH = 500
/** Runs one LIST_OWN_RUNS step reads at most: a caller whose runs are few among many pays in steps, never holding Redis long. */
const OWN_RUNS_STEP = 1000

/** An app's runs in Redis: listed from the app's indexes by status (redis-run-index.ts), its queued ones canceled by a script over its queue. */
export class RedisListing implements RunListing {
  readonly #ctx: RedisContext

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
  }

  async list (scope: RunScope, request: ListRequest): Promise<RunPage> {
    const keys = new ScopeKeys(scope)
    const { limit, after } = request
    // one more than the page: whether anything follows it
    const listed = request.sub !== undefined
      ? await this.#listOwn(keys, request, request.sub)
      : await guard(LIST_RUNS.call(this.#ctx.redis, {
        index: keys.runs,
        runKeyPrefix: keys.run(''), maxScore: after === undefined ? '+inf' : after.createdAt, after: after?.runId ?? '',
        statuses: (request.statuses ?? RUN_STATUSES).join(','), wanted: limit + 1
      }))
    const found = listed.map(run => ({ record: recordOf(run.record, run.webhookState), at: { createdAt: run.score, runId: run.runId } }))
    if (found.length <= limit) return { records: found.map(run => run.record), next: undefined }
    return { records: found.slice(0, limit).map(run => run.record), next: (found[limit - 1] as { at: ListPosition }).at }
  }

  /** The next `limit` + 1 runs `sub` submitted, read in steps of at most OWN_RUNS_STEP runs, each going on where the one before stopped. */
  async #listOwn (keys: ScopeKeys, request: ListRequest, sub: string): Promise<ListedRun[]> {
    const wanted = request.limit + 1
    const found: ListedRun[] = []
    let from: { score: string | number, runId: string } = request.after === undefined ? { score: '+inf', runId: '' } : { score: request.after.createdAt, runId: request.after.runId }
    for (;;) {
      const step = await guard(LIST_OWN_RUNS.call(this.#ctx.redis, {
        index: keys.runs,
        runKeyPrefix: keys.run(''), maxScore: from.score, after: from.runId, statuses: (request.statuses ?? RUN_STATUSES).join(','),
        wanted: wanted - found.length, sub, budget: OWN_RUNS_STEP
      }))
      found.push(...step.runs)
      if (step.stopped === undefined || found.length >= wanted) return found
      from = step.stopped
    }
  }

  async cancelQueued (scope: RunScope, sub?: string): Promise<number> {
    const keys = new ScopeKeys(scope)
    const ends = `,"completed_at":${JSON.stringify(new Date().toISOString())},"error":${JSON.stringify({ message: CANCELED_MESSAGE })}`
    let canceled = 0
    let from = '-'
    for (;;) {
      const step = await guard(CANCEL_QUEUED.call(this.#ctx.redis, {
        queue: keys.queue, queuedBytes: keys.queuedBytes, oldRunningSet: keys.running, expiry: keys.expiry, turns: keys.turns, index: keys.runs,
        runKeyPrefix: keys.run(''), eventsKeyPrefix: keys.events(''), liveChannelPrefix: keys.live(''), from, count: CANCEL_BATCH,
        canceledFields: ends, ttlSeconds: this.#ctx.settings.retentionSeconds, indexCutoffMs: this.#ctx.indexCutoff(),
        bySub: sub === undefined ? '' : '1', sub: sub ?? ''
      }))
      canceled += step.canceled
      if (step.last === '') return canceled
      from = step.last
    }
  }

  async priorities (scope: RunScope, runIds: readonly string[]): Promise<RunPriority[]> {
    const keys = new ScopeKeys(scope)
    // SUBMIT wrote them in the run's hash (a recorded sync run has neither); every read is sent at once
    const fields = await guard(Promise.all(runIds.map(async runId => await this.#ctx.redis.hmget(keys.run(runId), 'urgency', 'caller'))))
    return fields.map(([urgency, caller]) => ({ urgency: urgency === null ? DEFAULT_URGENCY : Number(urgency), caller: caller ?? '' }))
  }
}

/** A record as stored, with its webhook's delivery state (kept beside it: `<status> <attempts>`, '' none). */
function recordOf (raw: string, webhook: string): RunRecord {
  const record = JSON.parse(raw) as RunRecord
  if (webhook === '') return record
  const [status, attempts] = webhook.split(' ') as [WebhookStatus, string]
  return withWebhook(record, { status, attempts: Number(attempts) })
}
