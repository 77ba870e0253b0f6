import type { OtlpProtocol, SidecarConfig, TraceSampler } from '../config/sidecar-config.ts'

/** What the tracer needs (docs/tracing.md, "Turning it on": the standard OTEL_* variables). */
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
