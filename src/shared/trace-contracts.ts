import type { IncomingHttpHeaders } from 'node:http'

/** W3C trace context, as the headers that carry it. */
export interface TraceContext {
  readonly traceparent: string
  readonly tracestate?: string | undefined
}

/** Span attributes, as OpenTelemetry takes them. */
export type TraceAttributes = Record<string, string | number | boolean>

/** A client span under way: the context its request carries, and its end. */
export interface TraceSpan {
  readonly context: TraceContext
  /** Ends it with the status the request got (0: none, and `error` says why). */
  end: (status: number, error?: string) => void
}

/** The spans of one /v4 call (docs/tracing.md, "The spans"). */
export interface CallTrace {
  /** The call's server span: what the call starts (its webhook, its async run) continues. */
  readonly context: TraceContext
  /** The call waited for its slot from `startMs` to `endMs` (epoch ms, fractional): its `queue` span. */
  queued: (startMs: number, endMs: number) => void
  /** The request to the app: a client span under the call's. */
  appRequest: (method: string) => TraceSpan
  /** The call is over: the status it got, its run id. */
  end: (status: number, runId: string) => void
}

/** Makes the sidecar's spans; there is one only when OTEL_EXPORTER_OTLP_ENDPOINT is set. */
export interface Tracer {
  /** A /v4 call arrived: its server span, continuing the caller's trace context when it sent one. */
  startCall: (method: string, headers: IncomingHttpHeaders) => CallTrace
  /** A request the sidecar makes on a run's behalf (an async run's, a webhook attempt): a client span under `parent`, or a new trace. */
  startClient: (name: string, parent: TraceContext | undefined, attributes: TraceAttributes) => TraceSpan
  /** Exports what is still buffered, then stops. */
  close: () => Promise<void>
}

/** The trace context a request carries in its headers, or undefined. */
export function traceContextOf (headers: IncomingHttpHeaders): TraceContext | undefined {
  const traceparent = headers.traceparent
  if (typeof traceparent !== 'string') return undefined
  const tracestate = headers.tracestate
  return { traceparent, tracestate: typeof tracestate === 'string' ? tracestate : undefined }
}

/** The port an http(s) URL reaches (its default when it names none): spans' `server.port`. */
export const portOf = (url: URL): number => url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port)
