const LINE_BREAK = /\r\n|\r|\n/

/**
 * One server-sent event: `data: <line>` for every line of `data` (CRLF, CR and LF all break
 * lines, as the WHATWG parser reads them), optional `id:` and `event:` fields, and the blank line.
 */
export function frameSseEvent (data: string, event?: string, id?: number | string): string {
  const head = (id === undefined ? '' : `id: ${id}\n`) + (event === undefined ? '' : `event: ${event}\n`)
  if (!data.includes('\n') && !data.includes('\r')) return `${head}data: ${data}\n\n`
  return `${head}data: ${data.split(LINE_BREAK).join('\ndata: ')}\n\n`
}

/** The comment sent when a stream has been idle: ignored by every SSE client. */
export const SSE_HEARTBEAT = ': keep-alive\n\n'

/** The event that ends a stream whose app failed. */
export function frameSseError (message: string): string {
  return frameSseEvent(JSON.stringify({ message }), 'error')
}

/** How the last event id of a finished stream ends: a reconnect carrying it is answered 204 (run ids never hold a `.`). */
export const DONE_ID_SUFFIX = '.done'

/** The last event id of run `runId`'s finished stream. */
export function doneEventId (runId: string): string {
  return runId + DONE_ID_SUFFIX
}

/** The frame that ends a converted stream: an id and no data, so nothing is dispatched but an EventSource keeps the id. */
export function frameSseDone (runId: string): string {
  return `id: ${doneEventId(runId)}\n\n`
}
