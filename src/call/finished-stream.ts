import { DONE_ID_SUFFIX } from '../stream/sse-frame.ts'
import type { HttpCall } from './http-call.ts'

/**
 * The finished-stream stage (204): a GET or HEAD whose `Last-Event-ID` ends in `.done` is an
 * EventSource reconnecting to a stream that already ended; 204 tells it to stop, and the call never
 * reaches the app (nor the run routes). True when the call was answered.
 */
export function answerFinishedStream (call: HttpCall): boolean {
  const req = call.req
  const lastEventId = req.headers['last-event-id']
  if (typeof lastEventId !== 'string' || !lastEventId.endsWith(DONE_ID_SUFFIX) || (req.method !== 'GET' && req.method !== 'HEAD')) return false
  if (!call.settled) call.out.writeHead(204, { 'x-request-id': call.runId }).end()
  return true
}
