import type { TraceContext } from '../shared/trace-contracts.ts'

/** A header of a stored request (a flat [name, value, …] list, as forwarded), by its lower-case name. */
export function storedHeader (headers: readonly string[], name: string): string | undefined {
  for (let i = 0; i < headers.length; i += 2) {
    const header = headers[i] as string
    if (header.length === name.length && header.toLowerCase() === name) return headers[i + 1]
  }
  return undefined
}

/** The trace context a stored request carries (its submitter's). */
export function storedTrace (headers: readonly string[]): TraceContext | undefined {
  const traceparent = storedHeader(headers, 'traceparent')
  return traceparent === undefined ? undefined : { traceparent, tracestate: storedHeader(headers, 'tracestate') }
}
