import type { IncomingMessage } from 'node:http'
import { DEFAULT_URGENCY } from '../shared/fair-queue.ts'
import type { CallRecord } from './call-record.ts'

/**
 * The priority stage (no refusal): the call's urgency (`Priority: u=<0-7>`, RFC 9218; absent or
 * malformed: 3) and the caller its waits are shared fairly by (the token's `sub`; with auth off,
 * or a token without one: the first `X-Forwarded-For` address, else the peer address).
 */
export function readPriority (call: CallRecord): void {
  const { headers } = call.req
  const priority = headers.priority
  if (priority !== undefined) call.urgency = urgencyOf(Array.isArray(priority) ? priority.join(',') : priority)
  call.fairCaller = call.caller !== '' ? call.caller : addressOf(call.req)
}

/** RFC 9218's urgency from a structured-field dictionary read leniently (`u=1, i`, `i, u=2`); only `u` counts, the last one when repeated. */
export function urgencyOf (priority: string): number {
  let urgency = DEFAULT_URGENCY
  for (const member of priority.split(',')) {
    const equals = member.indexOf('=')
    if (equals === -1 || member.slice(0, equals).trim() !== 'u') continue
    const semicolon = member.indexOf(';', equals) // parameters of the member are ignored
    const value = member.slice(equals + 1, semicolon === -1 ? undefined : semicolon).trim()
    urgency = value.length === 1 && value >= '0' && value <= '7' ? value.charCodeAt(0) - 48 : DEFAULT_URGENCY
  }
  return urgency
}

function addressOf (req: IncomingMessage): string {
  const header = req.headers['x-forwarded-for']
  const forwarded = Array.isArray(header) ? header[0] : header
  if (forwarded !== undefined && forwarded !== '') {
    const comma = forwarded.indexOf(',')
    const first = (comma === -1 ? forwarded : forwarded.slice(0, comma)).trim()
    if (first !== '') return first
  }
  return req.socket.remoteAddress ?? ''
}
