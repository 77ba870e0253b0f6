/**
 * Every failure the sidecar answers itself is one of these classes: each carries the HTTP status
 * the caller gets and a stable code for logs and metrics. Bodies are always `{"message": …}`.
 */
export class SidecarError extends Error {
  readonly status: number
  readonly code: string
  /** Extra response headers (for example `Retry-After`). */
  readonly headers: Readonly<Record<string, string>> | undefined

  constructor (status: number, code: string, message: string, headers?: Record<string, string>) {
    super(message)
    this.name = new.target.name
    this.status = status
    this.code = code
    this.headers = headers
  }

  /** The JSON body sent to the caller. */
  body (): string {
    return JSON.stringify({ message: this.message })
  }
}

export class MalformedRequestError extends SidecarError {
  constructor (message: string) { super(400, 'SIDECAR_MALFORMED_REQUEST', message) }
}

export class MissingTokenError extends SidecarError {
  constructor () { super(401, 'SIDECAR_MISSING_TOKEN', 'missing bearer token') }
}

export class InvalidTokenError extends SidecarError {
  constructor (reason: string) { super(401, 'SIDECAR_INVALID_TOKEN', `invalid token: ${reason}`) }
}

export class ForbiddenProjectError extends SidecarError {
  constructor () { super(403, 'SIDECAR_FORBIDDEN', 'token is not valid for this project') }
}

export class RouteNotFoundError extends SidecarError {
  constructor (message = 'no such route') { super(404, 'SIDECAR_NOT_FOUND', message) }
}

export class MethodNotAllowedError extends SidecarError {
  constructor (allow: string) {
    super(405, 'SIDECAR_METHOD_NOT_ALLOWED', 'method not allowed', { allow })
  }
}

export class BodyTooLargeError extends SidecarError {
  constructor (limit: number) {
    super(413, 'SIDECAR_BODY_TOO_LARGE', `request body exceeds ${limit} bytes`)
  }
}

export class AppUnreachableError extends SidecarError {
  constructor (detail: string) { super(502, 'SIDECAR_APP_UNREACHABLE', `app unreachable: ${detail}`) }
}

export class StoreUnreachableError extends SidecarError {
  constructor (detail: string) {
    super(502, 'SIDECAR_STORE_UNREACHABLE', `build store unreachable: ${detail}`)
  }
}

export class QueueFullError extends SidecarError {
  constructor (retryAfterSeconds: number) {
    super(503, 'SIDECAR_QUEUE_FULL', 'too many requests waiting for the app', {
      'retry-after': String(retryAfterSeconds)
    })
  }
}

export class DeadlineExceededError extends SidecarError {
  constructor (seconds: number) {
    super(504, 'SIDECAR_DEADLINE_EXCEEDED', `request exceeded its deadline of ${seconds}s`)
  }
}

/** A configuration value that cannot be used; the message names the variable. */
export class ConfigError extends Error {
  readonly variable: string
  constructor (variable: string, message: string) {
    super(`${variable}: ${message}`)
    this.name = 'ConfigError'
    this.variable = variable
  }
}
