import { MethodNotAllowedError } from '../../errors.ts'
import type { StageCall } from '../../call/stage-call.ts'
import { cursorOf, parseListQuery } from '../../runs/routes/run-list-query.ts'
import { recordJson } from '../../runs/run-record.ts'
import type { RunRecord, RunScope } from '../../runs/run-data.ts'
import type { RunPriority } from '../../runs/store/run-listing.ts'
import type { RunStore } from '../../runs/store/run-store.ts'
import { sendJson } from '../../shared/http-answers.ts'

const GET = ['GET', 'HEAD']

/**
 * `GET /console/api/runs?status=&limit=&cursor=` (docs/console.md, "Runs"): the page `GET …/_runs`
 * answers (its query, cursor and errors), each run with its `caller` (null: not kept) and `urgency`
 * too. They are read for the page alone: the public listing, and a call, do nothing more for them.
 */
export async function serveConsoleRuns (call: StageCall, store: RunStore, scope: RunScope, query: string): Promise<void> {
  if (!GET.includes(call.req.method as string)) throw new MethodNotAllowedError(GET.join(', '))
  const request = parseListQuery(query)
  const page = await store.listing.list(scope, request)
  const priorities = page.records.length === 0 ? [] : await store.listing.priorities(scope, page.records.map(record => record.run_id))
  let json = '{"runs":['
  for (let i = 0; i < page.records.length; i++) {
    if (i > 0) json += ','
    const { urgency, caller } = priorities[i] as RunPriority
    // the listing's own record (it ends with its `}`), then the two fields
    const record = recordJson({ record: page.records[i] as RunRecord, resultJson: undefined, async: true })
    json += `${record.slice(0, -1)},"caller":${caller === '' ? 'null' : JSON.stringify(caller)},"urgency":${urgency}}`
  }
  json += `],"next_cursor":${page.next === undefined ? 'null' : JSON.stringify(cursorOf(request.statuses, page.next))}}`
  if (!call.settled) sendJson(call.out, 200, json, { 'x-request-id': call.runId })
}
