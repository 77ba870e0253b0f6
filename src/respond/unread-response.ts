import { type IncomingMessage, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { Writable } from 'node:stream'

/**
 * A response nobody reads, for a call whose caller was answered otherwise (its `Prefer: wait` ran
 * out: 202): the sinks answer the app's response into it as they would the caller's, so what they
 * feed the run's capture (the envelope's result, a stream's events) is exactly what the caller
 * would have got. Its bytes go nowhere, and never pause the app.
 */
export function unreadResponse (req: IncomingMessage): ServerResponse {
  const res = new ServerResponse(req)
  const nowhere = new Writable({ write (_chunk, _encoding, done) { done() } })
  res.assignSocket(nowhere as unknown as Socket)
  return res
}
