/** A body as a JSON value: embedded as sent when it parses as JSON, else a JSON string. */
export function resultJson (text: string): string {
  const trimmed = text.trim()
  if (trimmed !== '') {
    try {
      JSON.parse(trimmed)
      return trimmed
    } catch {}
  }
  return JSON.stringify(text)
}

/** Milliseconds with microsecond precision, as a JSON number. */
export function roundedMs (ms: number): number {
  return Math.round(ms * 1000) / 1000
}
