// What the stream and webhook code count, as interfaces: the sidecar's prom-client metrics
// implement them, and those folders need not import the sidecar.

export interface GaugeLike {
  inc: (value?: number) => void
  dec: (value?: number) => void
}

export interface CounterLike {
  inc: (value?: number) => void
}

export interface LabelledCounter<Label extends string> {
  labels: (label: Label) => CounterLike
}

export interface StreamMetrics {
  /** Server-sent event streams open to callers. */
  readonly sseStreams: GaugeLike
  /** Server-sent events sent to callers. */
  readonly sseEvents: CounterLike
}

export type WebhookAttemptOutcome = '2xx' | '404' | '4xx' | '5xx' | 'other' | 'network' | 'timeout' | 'refused'
export type WebhookDeliveryResult = 'delivered' | 'failed' | 'dropped'

export interface WebhookMetrics {
  readonly webhookAttempts: LabelledCounter<WebhookAttemptOutcome>
  readonly webhookDeliveries: LabelledCounter<WebhookDeliveryResult>
}

/** Why a call or run was canceled (sidecar_cancels_total). */
export type CancelCause = 'caller' | 'deadline' | 'queue_ttl' | 'request'
/** How an APP_CANCEL_PATH request went (sidecar_app_cancel_requests_total). */
export type AppCancelOutcome = 'sent' | 'failed'
/** Why an attempt of an async run was interrupted (sidecar_run_retries_total, and the run record's `interruptions`). */
export type InterruptionReason = 'replica stopped' | 'replica lost' | 'app unreachable'
