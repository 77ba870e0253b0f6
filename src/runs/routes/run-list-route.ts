import { recordJson } from '../run-record.ts'
import type { RunStore } from '../store/run-store.ts'
import type { RunRecord, RunStatus } from '../run-data.ts'
import { sendJson } from '../../shared/http-answers.ts'
import type { LabelledCounter } from '../../shared/metric-contracts.ts'
import type { StageCall } from '../../call/stage-call.ts'
import { checkPurgeQuery, cursorOf, parseListQuery } from './run-list-query.ts'
import { type RunAccessRule, type RunRoute, subOf } from './run-route.ts'

export interface RunListDeps extends RunAccessRule {
  readonly store: RunStore
  readonly runsTotal: LabelledCounter<RunStatus>
}

/** `GET …/_runs` (the app's runs, a page at a time) and `DELETE …/_runs?status=queued` (its queued runs canceled). */
export function createRunList (deps: RunListDeps): (call: StageCall, route: RunRoute) => Promise<void> {
  const { store } = deps

  async function list (call: StageCall, route: RunRoute): Promise<void> {
    const request = parseListQuery(route.query)
    const page = await store.listing.list(route.scope, { ...request, sub: subOf(deps, call) })
    let json = '{"runs":['
    for (let i = 0; i < page.records.length; i++) {
      if (i > 0) json += ','
      // records without their results: a page of them stays small
      json += recordJson({ record: page.records[i] as RunRecord, resultJson: undefined, async: true })
    }
    json += `],"next_cursor":${page.next === undefined ? 'null' : JSON.stringify(cursorOf(request.statuses, page.next))}}`
    if (!call.settled) sendJson(call.out, 200, json, { 'x-request-id': call.runId })
  }

  async function purge (call: StageCall, route: RunRoute): Promise<void> {
    checkPurgeQuery(route.query)
    const canceled = await store.listing.cancelQueued(route.scope, subOf(deps, call))
    // counted as the cancel of each would count it (none had started)
    if (canceled > 0) deps.runsTotal.labels('canceled').inc(canceled)
    if (!call.settled) sendJson(call.out, 200, `{"canceled":${canceled}}`, { 'x-request-id': call.runId })
  }

  return async function serveRunList (call, route) {
    await (call.req.method === 'DELETE' ? purge : list)(call, route)
  }
}
