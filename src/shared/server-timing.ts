/**
 * `Server-Timing` of an answer the app gave (docs/tracing.md, "Server-Timing and metrics"):
 * `queue`, the call's wait for a slot; and `app`, the app's time, where the headers go out after
 * its last byte (the cortex envelope). Durations in ms.
 */
export function serverTiming (queueMs: number, appMs?: number): string {
  return appMs === undefined ? `queue;dur=${queueMs}` : `queue;dur=${queueMs}, app;dur=${appMs}`
}

/** Could name one of the sidecar's entries (a cheap test first: most apps send neither word). */
const SIDECAR_WORD = /queue|app/i
const COMMA = 0x2c
const QUOTE = 0x22
const BACKSLASH = 0x5c

/**
 * The Server-Timing a caller gets: the app's own entries first, in order, without any named
 * `queue` or `app` (the sidecar's names, in any case), then the sidecar's `timing`.
 */
export function withServerTiming (theirs: string | string[] | undefined, timing: string): string {
  if (theirs === undefined) return timing
  const text = Array.isArray(theirs) ? theirs.join(', ') : theirs
  if (!SIDECAR_WORD.test(text)) return `${text}, ${timing}`
  const kept = appEntries(text)
  return kept.length === 0 ? timing : `${kept.join(', ')}, ${timing}`
}

/** The entries of a Server-Timing list (split on commas outside quoted strings), trimmed, without empty ones and the sidecar's. */
function appEntries (text: string): string[] {
  const kept: string[] = []
  let start = 0
  let quoted = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (quoted) {
      if (c === BACKSLASH) i++
      else if (c === QUOTE) quoted = false
    } else if (c === QUOTE) {
      quoted = true
    } else if (c === COMMA) {
      keepEntry(text.slice(start, i), kept)
      start = i + 1
    }
  }
  keepEntry(text.slice(start), kept)
  return kept
}

function keepEntry (raw: string, kept: string[]): void {
  const entry = raw.trim()
  if (entry === '') return
  const semicolon = entry.indexOf(';')
  const name = (semicolon === -1 ? entry : entry.slice(0, semicolon)).trim().toLowerCase()
  if (name !== 'queue' && name !== 'app') kept.push(entry)
}
