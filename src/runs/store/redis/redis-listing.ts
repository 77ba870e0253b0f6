import { CANCELED_MESSAGE, withWebhook } from '../../run-record.ts'
import type { ListPosition, ListRequest, RunListing, RunPage } from '../run-listing.ts'
import type { RunRecord, RunScope, WebhookStatus } from '../../run-data.ts'
import { guard, type RedisContext, ScopeKeys } from './redis-context.ts'
import { CANCEL_QUEUED, LIST_RUNS } from './redis-list-scripts.ts'
import { RUN_STATUSES } from './redis-run-index.ts'

/** Queue entries one CANCEL_QUEUED goes through. */
const CANCEL_BATCH = 500

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
    const reply = await guard(LIST_RUNS.run(this.#ctx.redis, [keys.runs], [
      keys.run(''), after === undefined ? '+inf' : after.createdAt, after?.runId ?? '', (request.statuses ?? RUN_STATUSES).join(','), limit + 1
    ])) as Array<string | number>
    const found: Array<{ record: RunRecord, at: ListPosition }> = []
    for (let i = 0; i < reply.length; i += 4) {
      found.push({ record: recordOf(String(reply[i + 2]), String(reply[i + 3])), at: { createdAt: Number(reply[i + 1]), runId: String(reply[i]) } })
    }
    if (found.length <= limit) return { records: found.map(run => run.record), next: undefined }
    return { records: found.slice(0, limit).map(run => run.record), next: (found[limit - 1] as { at: ListPosition }).at }
  }

  async cancelQueued (scope: RunScope): Promise<number> {
    const keys = new ScopeKeys(scope)
    const ends = `,"completed_at":${JSON.stringify(new Date().toISOString())},"error":${JSON.stringify({ message: CANCELED_MESSAGE })}`
    let canceled = 0
    let from = '-'
    for (;;) {
      const [count, last] = await guard(CANCEL_QUEUED.run(this.#ctx.redis, [keys.queue, keys.queuedBytes, keys.running, keys.expiry, keys.turns, keys.runs], [
        keys.run(''), keys.events(''), keys.live(''), from, CANCEL_BATCH, ends, this.#ctx.settings.retentionSeconds, this.#ctx.indexCutoff()
      ])) as [number, string]
      canceled += Number(count)
      if (last === '' || last === null) return canceled
      from = String(last)
    }
  }
}

/** A record as stored, with its webhook's delivery state (kept beside it: `<status> <attempts>`, '' none). */
function recordOf (raw: string, webhook: string): RunRecord {
  const record = JSON.parse(raw) as RunRecord
  if (webhook === '') return record
  const [status, attempts] = webhook.split(' ') as [WebhookStatus, string]
  return withWebhook(record, { status, attempts: Number(attempts) })
}
