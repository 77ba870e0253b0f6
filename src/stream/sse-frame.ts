const LINE_BREAK = /\r\n|\r|\n/

/**
 * One server-sent event: `data: <line>` for every line of `data` (CRLF, CR and LF all break
 * lines, as the WHATWG parser reads them), optional `id:` and `event:` fields, and the blank line.
 */
export function frameSseEvent (data: string, event?: string, id?: number): string {
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
