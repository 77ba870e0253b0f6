import type { AnswerOut } from '../../shared/answer-writer.ts'
import { sendJson } from '../../shared/http-answers.ts'
import type { CallRoute } from '../../call/match-route.ts'

/** The body of the 202 that answers an async call (and its repeats). */
export const queuedBody = (runId: string): string => `{"run_id":${JSON.stringify(runId)},"status":"queued"}`

/** Where a run's record is read. */
export const runLocation = (route: CallRoute, runId: string): string => `/v4/${route.projectId}/${route.appName}/_runs/${runId}`

/** 202 with the run's id and `Location`; `replayed`: a repeat of a key's async request, answered with the first's run. */
export function answerQueued (res: AnswerOut, route: CallRoute, runId: string, replayed: boolean): void {
  const headers: Record<string, string> = replayed
    ? { 'x-request-id': runId, 'idempotent-replayed': 'true', location: runLocation(route, runId) }
    : { 'x-request-id': runId, location: runLocation(route, runId) }
  sendJson(res, 202, queuedBody(runId), headers)
}

/** 202 for a sync call whose `Prefer: wait=<seconds>` ran out: it goes on as a run, queued or already running. */
export function answerWaitRanOut (res: AnswerOut, route: CallRoute, runId: string, status: 'queued' | 'running', seconds: number): void {
  sendJson(res, 202, `{"run_id":${JSON.stringify(runId)},"status":"${status}"}`, {
    'x-request-id': runId, location: runLocation(route, runId), 'preference-applied': `wait=${seconds}`
  })
}
