import type { IncomingHttpHeaders } from 'node:http'
import { performance } from 'node:perf_hooks'
import {
  type Context, defaultTextMapGetter, defaultTextMapSetter, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, trace,
  type Tracer as ApiTracer
} from '@opentelemetry/api'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { resourceFromAttributes } from '@opentelemetry/resources'
import {
  AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, type Sampler, type SpanExporter, TraceIdRatioBasedSampler, TracerProvider
} from '@opentelemetry/sdk-trace'
import { type CallTrace, portOf, type TraceAttributes, type TraceContext, type Tracer, type TraceSpan } from '../shared/trace-contracts.ts'
import type { TraceSettings } from './trace-settings.ts'

/** The server span's `http.route`: the route template of docs/tracing.md, "The spans". */
export const CALL_ROUTE = '/v4/{project_id}/{app_name}/…'
/** Longest wait for the last export at shutdown. */
const CLOSE_TIMEOUT_MS = 2000

const propagator = new W3CTraceContextPropagator()

function samplerOf (settings: TraceSettings): Sampler {
  const ratio = new TraceIdRatioBasedSampler(settings.samplerArg)
  switch (settings.sampler) {
    case 'always_on': return new AlwaysOnSampler()
    case 'always_off': return new AlwaysOffSampler()
    case 'traceidratio': return ratio
    case 'parentbased_always_off': return new ParentBasedSampler({ root: new AlwaysOffSampler() })
    case 'parentbased_traceidratio': return new ParentBasedSampler({ root: ratio })
    default: return new ParentBasedSampler({ root: new AlwaysOnSampler() })
  }
}

/** The headers a request made in `context` carries. */
function headersOf (context: Context): TraceContext {
  const carrier: { traceparent?: string, tracestate?: string } = {}
  propagator.inject(context, carrier, defaultTextMapSetter)
  return { traceparent: carrier.traceparent ?? '', tracestate: carrier.tracestate }
}

/** Epoch ms, fractional: span times from performance.now() readings. */
const epochMs = (): number => performance.timeOrigin + performance.now()

/**
 * Ends `span` with the HTTP status it got (0: none), as the semantic conventions have it: an error
 * from `errorFrom` up (client spans 400, server spans 500), or when `error` says why it failed.
 */
function endHttpSpan (span: Span, status: number, errorFrom: number, error?: string): void {
  if (status > 0) span.setAttribute('http.response.status_code', status)
  if (error !== undefined) {
    span.setAttribute('error.type', status > 0 ? String(status) : 'network')
    span.setStatus({ code: SpanStatusCode.ERROR, message: error })
  } else if (status >= errorFrom) {
    span.setAttribute('error.type', String(status))
    span.setStatus({ code: SpanStatusCode.ERROR })
  }
  span.end()
}

/** A client span: 4xx and 5xx are errors. */
class ClientSpan implements TraceSpan {
  readonly context: TraceContext
  readonly #span: Span

  constructor (span: Span, parent: Context) {
    this.#span = span
    this.context = headersOf(trace.setSpan(parent, span))
  }

  end (status: number, error?: string): void { endHttpSpan(this.#span, status, 400, error) }
}

/** One /v4 call's server span and its children. */
class OtelCallTrace implements CallTrace {
  readonly #tracer: ApiTracer
  readonly #span: Span
  readonly #context: Context
  readonly #app: TraceAttributes
  #headers: TraceContext | undefined

  constructor (tracer: ApiTracer, method: string, headers: IncomingHttpHeaders, app: TraceAttributes) {
    this.#tracer = tracer
    this.#app = app
    const parent = propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter)
    this.#span = tracer.startSpan(`${method} ${CALL_ROUTE}`, {
      kind: SpanKind.SERVER,
      attributes: { 'http.request.method': method, 'http.route': CALL_ROUTE }
    }, parent)
    this.#context = trace.setSpan(parent, this.#span)
  }

  get context (): TraceContext {
    this.#headers ??= headersOf(this.#context)
    return this.#headers
  }

  queued (startMs: number, endMs: number): void {
    this.#tracer.startSpan('queue', { kind: SpanKind.INTERNAL, startTime: startMs }, this.#context).end(endMs)
  }

  appRequest (method: string): TraceSpan {
    const span = this.#tracer.startSpan(method, { kind: SpanKind.CLIENT, attributes: { 'http.request.method': method, ...this.#app } }, this.#context)
    return new ClientSpan(span, this.#context)
  }

  end (status: number, runId: string): void {
    this.#span.setAttribute('run_id', runId)
    endHttpSpan(this.#span, status, 500)
  }
}

/**
 * The OpenTelemetry tracer: spans batched and handed to `exporter` (OTLP/HTTP), W3C trace context
 * read from callers and written to the app and webhooks. An export that fails is dropped by the
 * batch processor: calls never wait for the collector.
 */
export class OtelTracer implements Tracer {
  readonly #provider: TracerProvider
  readonly #tracer: ApiTracer
  readonly #app: TraceAttributes

  constructor (settings: TraceSettings, exporter: SpanExporter) {
    this.#provider = new TracerProvider({
      resource: resourceFromAttributes({ 'service.name': settings.serviceName }),
      sampler: samplerOf(settings),
      spanProcessors: [new BatchSpanProcessor({ exporter, scheduledDelayMillis: settings.scheduleDelayMs })]
    })
    this.#tracer = this.#provider.getTracer('app-sidecar')
    this.#app = {
      'server.address': settings.appUrl.hostname,
      'server.port': portOf(settings.appUrl)
    }
  }

  startCall (method: string, headers: IncomingHttpHeaders): CallTrace {
    return new OtelCallTrace(this.#tracer, method, headers, this.#app)
  }

  startClient (name: string, parent: TraceContext | undefined, attributes: TraceAttributes): TraceSpan {
    const context = parent === undefined ? ROOT_CONTEXT : propagator.extract(ROOT_CONTEXT, parent, defaultTextMapGetter)
    const span = this.#tracer.startSpan(name, { kind: SpanKind.CLIENT, attributes, startTime: epochMs() }, context)
    return new ClientSpan(span, context)
  }

  async close (): Promise<void> {
    let timer: NodeJS.Timeout | undefined
    const timeout = new Promise<void>(resolve => { timer = setTimeout(resolve, CLOSE_TIMEOUT_MS) })
    await Promise.race([this.#provider.shutdown().catch(() => {}), timeout])
    clearTimeout(timer)
  }
}
