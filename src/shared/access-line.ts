import type { DestinationStream, Logger } from 'pino'

/** A request's log line (docs/errors.md, "What the log says"): only these fields, none of them a secret. */
export interface AccessLine {
  method: string | undefined
  path: string
  status: number
  duration: number
  runId: string
  aborted?: true
  error?: string
  reason?: string
}

/** pino's numeric info level. */
const INFO = 30

/** The loggers whose lines can be written by hand: pino's defaults (numeric level, epoch ms time, `msg`), no hooks. */
const plainLoggers = new WeakMap<Logger, { stream: DestinationStream, bindings: string }>()

/**
 * Lets `writeAccessLine` write `logger`'s request lines itself, to `stream`, after `bindings`
 * (the base fields as pino writes them: `,"name":"app-sidecar"`). Only for a logger made with
 * pino's default formatting, whose redact paths cannot match an access line's fields.
 */
export function writesAccessLinesByHand (logger: Logger, stream: DestinationStream, bindings: string): void {
  plainLoggers.set(logger, { stream, bindings })
}

/**
 * One request's line at info, exactly as pino would write `logger.info(line, msg)` (the same
 * bytes, key order included: test/call/access-line.test.ts) at a fraction of the cost: the
 * fields are known, so nothing is walked, redacted or probed. Every request writes one.
 */
export function writeAccessLine (logger: Logger, line: AccessLine, msg: string): void {
  const plain = plainLoggers.get(logger)
  if (plain === undefined) {
    logger.info(line, msg)
    return
  }
  if (!logger.isLevelEnabled('info')) return
  let json = `{"level":${INFO},"time":${Date.now()}${plain.bindings}`
  if (line.method !== undefined) json += `,"method":${JSON.stringify(line.method)}`
  json += `,"path":${JSON.stringify(line.path)},"status":${line.status},"duration":${line.duration},"runId":${JSON.stringify(line.runId)}`
  if (line.aborted === true) json += ',"aborted":true'
  if (line.error !== undefined) json += `,"error":${JSON.stringify(line.error)}`
  if (line.reason !== undefined) json += `,"reason":${JSON.stringify(line.reason)}`
  plain.stream.write(`${json},"msg":${JSON.stringify(msg)}}\n`)
}
