import pino, { type DestinationStream, type Logger } from 'pino'
import type { LogLevel } from '../config/sidecar-config.ts'

/**
 * The sidecar's pino logger. Request lines carry only method, path (no query), status, duration
 * and run id, so secrets cannot reach them; the redact list guards anything logged by mistake.
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
  return pino(options, destination ?? pino.destination({ dest: 1, sync: false }))
}
