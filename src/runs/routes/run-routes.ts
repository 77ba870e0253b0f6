import { MalformedRequestError, MethodNotAllowedError, SidecarError, TooManyReadersError } from '../../errors.ts'
import { recordJson } from '../run-record.ts'
import type { RunStore } from '../store/run-store.ts'
import type { RunStatus } from '../run-data.ts'
import { sendJson } from '../../shared/http-answers.ts'
import type { LabelledCounter, StreamMetrics } from '../../shared/metric-contracts.ts'
import { doneEventId, frameSseError, frameSseEvent } from '../../stream/sse-frame.ts'
import { SseWriter } from '../../stream/sse-writer.ts'
import { createRunCancel, type RunCancelDeps } from './run-cancel.ts'
import type { StageCall } from '../../call/stage-call.ts'
import { createRunList } from './run-list-route.ts'
import { readable, type RunRoute, subOf } from './run-route.ts'

export interface RunRoutesDeps extends RunCancelDeps {
  readonly store: RunStore
  /** RUN_MAX_READERS: most readers of run events served at once; beyond it 503. */
  readonly maxReaders: number
  readonly heartbeatMs: number
  readonly metrics: StreamMetrics
  readonly runsTotal: LabelledCounter<RunStatus>
}

/**
 * `GET …/_runs/{id}` (the record), `GET …/_runs/{id}/events` (SSE), `POST …/_runs/{id}/cancel`;
 * `GET` and `DELETE …/_runs` (run-list-route.ts). The stage always answers the call (true).
 */
export function createRunRoutes (deps: RunRoutesDeps): (call: StageCall, route: RunRoute) => Promise<boolean> {
  const { store } = deps

  async function record (call: StageCall, route: RunRoute): Promise<void> {
    const view = readable(await store.records.get(route.scope, route.runId), subOf(deps, call))
    if (!call.settled) sendJson(call.out, 200, recordJson(view), { 'x-request-id': call.runId })
  }

  const cancel = createRunCancel(deps)

  async function events (call: StageCall, route: RunRoute): Promise<void> {
    const after = startAfter(call.req.headers['last-event-id'], route.query)
    const sub = subOf(deps, call)
    // another's run is answered as one never recorded, before anything of it is read
    if (sub !== undefined) readable(await store.records.get(route.scope, route.runId), sub)
    const items = await store.records.follow(route.scope, route.runId, after, call.signal)
    if (call.settled) return
    const { out } = call
    const writer = new SseWriter(out, call.runId, deps.heartbeatMs, deps.metrics)
    // the stream answers from here on: past DEADLINE_SECONDS it ends with an error event, not a cut connection
    call.forwarded = true
    call.onAbort({ abortFor: reason => { if (reason instanceof SidecarError) writer.fail(reason.message) } })
    try {
      for await (const item of items) {
        if (out.writableEnded) return
        let writable: boolean
        if (item.type === 'event') {
          writable = writer.framed(frameSseEvent(item.data, item.event, item.n), 1)
        } else if (item.type === 'gap') {
          writable = writer.framed(frameSseError(`events before ${item.first} are no longer kept`), 1)
        } else {
          // its id stops an EventSource: a reconnect with it is answered 204 (answerFinishedStream)
          writer.framed(frameSseEvent(recordJson(item.view), 'done', doneEventId(route.runId)), 1)
          break
        }
        // a slow reader is not buffered for: the store keeps the events until it catches up
        if (!writable && !out.destroyed) await out.drained(call.signal)
        if (out.destroyed) return
      }
    } catch (error) {
      // the store failed mid-stream (503 run store unavailable): the stream says so and ends; the
      // reader resumes with Last-Event-ID, as after any cut
      if (!(error instanceof SidecarError) || out.writableEnded) throw error
      writer.fail(error.message)
      return
    }
    writer.end()
  }

  const METHODS = { record: ['GET', 'HEAD'], events: ['GET'], cancel: ['POST'], list: ['GET', 'HEAD', 'DELETE'] } as const
  const serve = { record, events: boundedReaders(events, deps.maxReaders), cancel, list: createRunList(deps) }

  return async function serveRunRoute (call, route) {
    const allowed: readonly string[] = METHODS[route.action]
    if (!allowed.includes(call.req.method as string)) throw new MethodNotAllowedError(allowed.join(', '))
    await serve[route.action](call, route)
    return true
  }
}

/** `serve` for at most `max` readers at once (each until its stream ends or its caller leaves); beyond it 503. */
function boundedReaders (serve: (call: StageCall, route: RunRoute) => Promise<void>, max: number): (call: StageCall, route: RunRoute) => Promise<void> {
  let readers = 0
  return async (call, route) => {
    if (readers >= max) throw new TooManyReadersError()
    readers++
    try {
      await serve(call, route)
    } finally {
      readers--
    }
  }
}

/** Where a reader starts: `Last-Event-ID` (an EventSource reconnecting), else `?after=`, else the first event (-1). */
function startAfter (lastEventId: string | string[] | undefined, query: string): number {
  if (typeof lastEventId === 'string') return eventNumber(lastEventId, 'Last-Event-ID')
  if (query !== '') {
    const after = new URLSearchParams(query).get('after')
    if (after !== null) return eventNumber(after, 'after')
  }
  return -1
}

function eventNumber (text: string, name: string): number {
  const trimmed = text.trim()
  const n = Number(trimmed)
  if (!/^\d{1,15}$/.test(trimmed) || !Number.isSafeInteger(n)) throw new MalformedRequestError(`${name} must be an event number (0, 1, 2, …)`)
  return n
}
