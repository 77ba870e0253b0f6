import { MalformedRequestError } from '../errors.ts'

/** The longest `Cancel-After` (one year), as docs/controlling-work.md, "Time limits" bounds it. */
const MAX_SECONDS = 31_536_000
const DURATION = /^(\d{1,9})([smh]?)$/
const UNIT_SECONDS: Readonly<Record<string, number>> = { '': 1, s: 1, m: 60, h: 3600 }

/**
 * A `Cancel-After` value in seconds: `<n>` or `<n>s`, `<n>m`, `<n>h`, 1 s to one year; undefined
 * when the header is absent. Anything else is a 400 (the caller asked for a limit it would not get).
 */
export function cancelAfterSeconds (value: string | string[] | undefined): number | undefined {
  if (value === undefined) return undefined
  const match = typeof value === 'string' ? DURATION.exec(value.trim()) : null
  const seconds = match === null ? 0 : Number(match[1]) * (UNIT_SECONDS[match[2] as string] as number)
  if (seconds < 1 || seconds > MAX_SECONDS) throw new MalformedRequestError('malformed Cancel-After: a whole number of seconds (or <n>s, <n>m, <n>h), 1 s to one year')
  return seconds
}
