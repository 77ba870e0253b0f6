import type { Logger } from 'pino'
import type { CounterLike } from './metric-contracts.ts'

/**
 * Reports an exception nobody expected, caught where it cannot answer a caller (a background
 * path, a store write, the process guard): logged once with its stack, counted in
 * sidecar_internal_errors_total. Whoever catches it fails the one run it belongs to, no more.
 */
export type InternalErrorReporter = (error: unknown, fields?: Record<string, unknown>) => void

/** The reporter writing to `logger` (level error, `internal error`) and counting in `counter`. */
export function internalErrorReporter (logger: Logger, counter: CounterLike): InternalErrorReporter {
  return (error, fields) => {
    counter.inc()
    logger.error({ err: error, ...fields }, 'internal error')
  }
}
