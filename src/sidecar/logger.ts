import type Pino from 'pino'
import type { DestinationStream, Logger } from 'pino'
import type { LogLevel } from '../config/env-parsers.ts'
import { writesAccessLinesByHand } from '../shared/access-line.ts'
import { requireCjs } from '../shared/require-cjs.ts'

const pino = requireCjs('pino') as typeof Pino

/** How long a buffered log line may wait before it is written. */
const LOG_FLUSH_INTERVAL_MS = 250

/**
 * The sidecar's pino logger. Request lines carry only method, path (no query), status, duration
 * and run id, so secrets cannot reach them; the redact list guards anything logged by mistake.
 * Lines are buffered (2 KiB, or 250 ms at most) so a busy sidecar makes one write per batch,
 * not one per request; the bins flush on exit. Writes are at most 4 KiB: sonic-boom measures its
 * whole pending buffer again on every line (0.8 µs per line at 4 KiB pending, 3 µs at 16 KiB),
 * and a pipe write of up to 4 KiB (PIPE_BUF) is atomic.
 */
export function createLogger (level: LogLevel, destination?: DestinationStream): Logger {
  const options = {
    level,
    base: { name: 'app-sidecar' },
    redact: {
      paths: [
        'authorization', 'token', 'secret', 'headers.authorization', 'headers["x-webhook-secret"]',
        'req.headers.authorization', 'req.headers["x-webhook-secret"]', 'err.config', 'err.headers'
      ],
      censor: '[redacted]'
    }
  }
  if (destination !== undefined) return plain(pino(options, destination), destination)
  const stdout = pino.destination({ dest: 1, sync: false, minLength: 2048, maxWrite: 4096 })
  setInterval(() => { stdout.flush() }, LOG_FLUSH_INTERVAL_MS).unref()
  return plain(pino(options, stdout), stdout)
}

/** The request lines of `logger` are written by hand, to the same stream, in the same order as its other lines. */
function plain (logger: Logger, stream: DestinationStream): Logger {
  writesAccessLinesByHand(logger, stream, (logger as unknown as Record<symbol, string>)[pino.symbols.chindingsSym] ?? '')
  return logger
}
