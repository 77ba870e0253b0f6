/**
 * Every failure the sidecar answers itself is one of these classes: each carries the HTTP status
 * the caller gets and a stable code for logs and metrics. Bodies are always `{"message": …}`.
 */
export class SidecarError extends Error {
  readonly status: number
  readonly code: string
  /** Extra response headers (for example `Retry-After`). */
  readonly headers: Readonly<Record<string, string>> | undefined
  /** Why, as the log line says it (never sent to the caller): the message with where it happened. */
  readonly reason: string

  constructor (status: number, code: string, message: string, headers?: Record<string, string>, reason?: string) {
    super(message)
    this.name = new.target.name
    this.status = status
    this.code = code
    this.headers = headers
    this.reason = reason ?? message
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

/** A CORS preflight from an origin CORS_ALLOWED_ORIGINS does not name. */
export class OriginNotAllowedError extends SidecarError {
  constructor () { super(403, 'SIDECAR_ORIGIN_NOT_ALLOWED', 'origin not allowed') }
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
  /** `target`: the app's URL, for the log line. */
  constructor (detail: string, target?: string) {
    const message = `app unreachable: ${detail}`
    super(502, 'SIDECAR_APP_UNREACHABLE', message, undefined, target === undefined ? message : `${message} (${target})`)
  }
}

/** The key set at an AUTH_JWKS_URL that is not the build store's could not be fetched. */
export class TokenKeysUnreachableError extends SidecarError {
  constructor (why: string) {
    const message = 'token keys unreachable: AUTH_JWKS_URL could not be fetched'
    super(502, 'SIDECAR_TOKEN_KEYS_UNREACHABLE', message, undefined, `${message} (${why})`)
  }
}

export class StoreUnreachableError extends SidecarError {
  /** `why`: what failed and where, for the log line (a JWKS fetch's status, the store's URL). */
  constructor (detail: string, why?: string) {
    const message = `build store unreachable: ${detail}`
    super(502, 'SIDECAR_STORE_UNREACHABLE', message, undefined, why === undefined ? message : `${message} (${why})`)
  }
}

export class QueueFullError extends SidecarError {
  constructor (retryAfterSeconds: number) {
    super(503, 'SIDECAR_QUEUE_FULL', 'too many requests waiting for the app', {
      'retry-after': String(retryAfterSeconds)
    })
  }
}

/** A call waited APP_READY_TIMEOUT_SECONDS for an app that was never ready. */
export class AppNotReadyError extends SidecarError {
  constructor (seconds: number) {
    super(503, 'SIDECAR_APP_NOT_READY', 'app not ready', { 'retry-after': '5' }, `app not ready within APP_READY_TIMEOUT_SECONDS (${seconds} s)`)
  }
}

/** The sidecar's answer to an exception nobody expected (it is logged once, with its stack). */
export class SidecarInternalError extends SidecarError {
  constructor () { super(500, 'SIDECAR_INTERNAL', 'internal error') }
}

/** One instance serves every such answer: it carries nothing of the failure. */
export const SIDECAR_INTERNAL = new SidecarInternalError()

/**
 * Never sent: what the log line, `sidecar_requests_total` and a webhook record (499) for a caller
 * that left before a plain answer was complete.
 */
export class CallerDisconnectedError extends SidecarError {
  constructor () { super(499, 'SIDECAR_CALLER_GONE', 'caller disconnected') }
}

/**
 * The reason a call aborts when its caller goes away before the answer is complete: an abort
 * reason, never an answer (what is recorded then is CallerDisconnectedError).
 */
export class CallerGoneError extends Error {
  constructor () { super('caller disconnected') }
}

/** Node's HTTP parser refused the headers as too large (Node's own 431). */
export class HeadersTooLargeError extends SidecarError {
  constructor () { super(431, 'HTTP_HEADERS_TOO_LARGE', 'request headers too large') }
}

/** The headers were not complete within the headers timeout (Node's own 408). */
export class HeadersTimeoutError extends SidecarError {
  constructor () { super(408, 'HTTP_HEADERS_TIMEOUT', 'request headers timed out') }
}

/** Anything else Node's HTTP parser refused (smuggling attempts, bad framing). */
export class MalformedHttpError extends SidecarError {
  constructor () { super(400, 'HTTP_MALFORMED_REQUEST', 'malformed request') }
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

/**
 * A failure the build store answers itself: the same shape as SidecarError (status, stable
 * `STORE_*` code, `{"message": …}` body), so one sender serves both.
 */
export class StoreError extends SidecarError {}

const BEARER_CHALLENGE = { 'www-authenticate': 'Bearer realm="build-store"' }

export class MalformedIdError extends StoreError {
  constructor (segment: string) {
    const shown = segment.length > 64 ? `${segment.slice(0, 64)}…` : segment
    super(400, 'STORE_MALFORMED_ID', `malformed path segment "${shown}": ids match [A-Za-z0-9][A-Za-z0-9._-]{0,127}`)
  }
}

export class InvalidBodyError extends StoreError {
  constructor (message: string) { super(400, 'STORE_INVALID_BODY', message) }
}

export class StoreBodyTooLargeError extends StoreError {
  constructor (limit: number) { super(413, 'STORE_BODY_TOO_LARGE', `request body exceeds ${limit} bytes`) }
}

export class StoreMissingTokenError extends StoreError {
  constructor () { super(401, 'STORE_MISSING_TOKEN', 'missing bearer token', BEARER_CHALLENGE) }
}

export class StoreInvalidTokenError extends StoreError {
  constructor (reason: string) { super(401, 'STORE_INVALID_TOKEN', `invalid token: ${reason}`, BEARER_CHALLENGE) }
}

export class AdminTokenRequiredError extends StoreError {
  constructor (message = 'this route needs the admin token') { super(401, 'STORE_ADMIN_REQUIRED', message, BEARER_CHALLENGE) }
}

export class StoreForbiddenProjectError extends StoreError {
  constructor () { super(403, 'STORE_FORBIDDEN', 'token is not valid for this project') }
}

export class BuildNotFoundError extends StoreError {
  constructor () { super(404, 'STORE_BUILD_NOT_FOUND', 'no such build in this project and app') }
}

export class ServiceAccountNotFoundError extends StoreError {
  constructor () { super(404, 'STORE_SERVICE_ACCOUNT_NOT_FOUND', 'no such service account in this project') }
}

export class StoreRouteNotFoundError extends StoreError {
  constructor () { super(404, 'STORE_NOT_FOUND', 'no such route') }
}

export class StoreMethodNotAllowedError extends StoreError {
  constructor (allow: string) { super(405, 'STORE_METHOD_NOT_ALLOWED', 'method not allowed', { allow }) }
}

export class StoreInternalError extends StoreError {
  constructor () { super(500, 'STORE_INTERNAL', 'internal error') }
}

/** Another live build-store holds the embedded database folder; two writers would lose data. */
export class DataDirInUseError extends Error {
  readonly dataDir: string
  readonly holderPid: number
  constructor (dataDir: string, holderPid: number) {
    super(`DATA_DIR ${dataDir} is in use by another build-store (pid ${holderPid})`)
    this.name = 'DataDirInUseError'
    this.dataDir = dataDir
    this.holderPid = holderPid
  }
}

/** A `_runs` request for a run this store does not hold for this project and app (never recorded, expired, another app's). */
export class RunNotFoundError extends SidecarError {
  constructor () { super(404, 'SIDECAR_RUN_NOT_FOUND', 'no such run') }
}

/** The run store (Redis) cannot be reached: recorded-run requests wait for it to be back. */
export class RunStoreUnavailableError extends SidecarError {
  constructor (detail: string) {
    super(503, 'SIDECAR_RUN_STORE_UNAVAILABLE', 'run store unavailable', { 'retry-after': '1' }, `run store unavailable: ${detail}`)
  }
}

/** More than ASYNC_QUEUE_DEPTH async runs (or ASYNC_QUEUE_MAX_BYTES of their bodies) wait for this app; `bound`: which one, for the log line. */
export class AsyncQueueFullError extends SidecarError {
  constructor (bound = 'ASYNC_QUEUE_DEPTH') {
    super(503, 'SIDECAR_ASYNC_QUEUE_FULL', 'too many async runs waiting', { 'retry-after': '1' }, `too many async runs waiting (${bound})`)
  }
}

/** An async run's id (the caller's X-Request-Id) is already recorded for this app. */
export class RunIdTakenError extends SidecarError {
  constructor () { super(409, 'SIDECAR_RUN_ID_TAKEN', 'a run with this id already exists') }
}

/** Cancel of a run that has ended. */
export class RunFinishedError extends SidecarError {
  constructor () { super(409, 'SIDECAR_RUN_FINISHED', 'run already finished') }
}

/** Cancel of a recorded run that is not async (an Idempotency-Key call). */
export class RunNotAsyncError extends SidecarError {
  constructor () { super(409, 'SIDECAR_RUN_NOT_ASYNC', 'only async runs can be canceled') }
}

/** A repeat of a sync request whose Idempotency-Key's first request still runs. */
export class IdempotencyInProgressError extends SidecarError {
  constructor () { super(409, 'SIDECAR_IDEMPOTENCY_IN_PROGRESS', 'a request with this Idempotency-Key is in progress') }
}

/** An Idempotency-Key already used (per project, app and path) with another body. */
export class IdempotencyKeyReusedError extends SidecarError {
  constructor () { super(422, 'SIDECAR_IDEMPOTENCY_KEY_REUSED', 'Idempotency-Key reused with a different body') }
}

/** `Last-Event-ID` or `?after=` names an event the run has not produced. */
export class EventBeyondLastError extends SidecarError {
  constructor (after: number, last: number) {
    super(400, 'SIDECAR_EVENT_BEYOND_LAST', last < 0
      ? `event ${after} does not exist: the run has no events yet`
      : `event ${after} does not exist: the last event is ${last}`)
  }
}

/** A running async run canceled (through `_runs/{id}/cancel` on any replica): recorded on the run, 499. */
export class RunCanceledError extends SidecarError {
  constructor () { super(499, 'SIDECAR_RUN_CANCELED', 'run canceled') }
}

/** An async run whose `Cancel-After` passed (queued: it never reaches the app; running: its app request is cut): recorded on the run, 504. */
export class RunDeadlinePassedError extends SidecarError {
  constructor () { super(504, 'SIDECAR_RUN_DEADLINE_PASSED', 'deadline passed') }
}

/** An async run still queued ASYNC_QUEUE_TTL_SECONDS after its submission: recorded on the run, 504; it never reaches the app. */
export class QueueExpiredError extends SidecarError {
  constructor () { super(504, 'SIDECAR_QUEUE_EXPIRED', 'expired in the queue') }
}

/** An event of the app's stream longer than STREAM_MAX_EVENT_BYTES: the stream ends with it, the app request is cut (502 on a run). */
export class EventTooLargeError extends SidecarError {
  constructor (limit: number) { super(502, 'SIDECAR_EVENT_TOO_LARGE', `event larger than ${limit} bytes`) }
}

/** More than RUN_MAX_READERS readers of run events on this replica. */
export class TooManyReadersError extends SidecarError {
  constructor () { super(503, 'SIDECAR_TOO_MANY_READERS', 'too many readers of run events', { 'retry-after': '1' }) }
}

/** An async run still at the app when SIGTERM's grace period ended: recorded on the run, 503. */
export class ReplicaStoppedError extends SidecarError {
  constructor () { super(503, 'SIDECAR_REPLICA_STOPPED', 'replica stopped') }
}
