import type { OtlpProtocol, SidecarConfig, TraceSampler } from '../config/sidecar-config.ts'
import type { Tracer } from '../shared/trace-contracts.ts'
import type { ExportFailureReport } from './export-failures.ts'

/** What the tracer needs (SPEC: Tracing; the standard OTEL_* variables). */
export interface TraceSettings {
  /** Where spans are POSTed (OTLP/HTTP). */
  readonly endpoint: URL
  /** `http/protobuf` (the OTLP default) or `http/json`. */
  readonly protocol: OtlpProtocol
  readonly serviceName: string
  readonly sampler: TraceSampler
  readonly samplerArg: number
  readonly scheduleDelayMs: number
  /** The app, for its client spans' server.address and server.port. */
  readonly appUrl: URL
}

/** The tracer's settings, or undefined when tracing is off (no endpoint, or OTEL_SDK_DISABLED). */
export function traceSettingsOf (config: SidecarConfig): TraceSettings | undefined {
  if (config.otelTracesEndpoint === undefined || config.otelSdkDisabled) return undefined
  return {
    endpoint: config.otelTracesEndpoint,
    protocol: config.otelTracesProtocol,
    serviceName: config.otelServiceName,
    sampler: config.otelTracesSampler,
    samplerArg: config.otelTracesSamplerArg,
    scheduleDelayMs: config.otelScheduleDelayMs,
    appUrl: config.appUrl
  }
}

/**
 * The tracer, or undefined when tracing is off. The OpenTelemetry SDK and exporter are loaded
 * only here, only when configured: without an endpoint they cost no memory and no CPU. A failed
 * export goes to `report` (a warn line at most once a minute, and the failures counter).
 */
export async function openTracer (settings: TraceSettings | undefined, report: ExportFailureReport): Promise<Tracer | undefined> {
  if (settings === undefined) return undefined
  const [{ OtelTracer }, { ReportingExporter }] = await Promise.all([import('./otel-tracer.ts'), import('./export-failures.ts')])
  // only the exporter of the protocol in use is loaded
  const { OTLPTraceExporter } = settings.protocol === 'http/json'
    ? await import('@opentelemetry/exporter-trace-otlp-http')
    : await import('@opentelemetry/exporter-trace-otlp-proto')
  const exporter = new OTLPTraceExporter({ url: settings.endpoint.href })
  return new OtelTracer(settings, new ReportingExporter(exporter, settings.endpoint.href, report))
}
