import { peerInstallArguments } from '../config/package-version.ts'
import { ConfigError } from '../errors.ts'
import type { Tracer } from '../shared/trace-contracts.ts'
import type { ExportFailureReport } from './export-failures.ts'
import type { TraceSettings } from './trace-settings.ts'

/**
 * The tracer, or undefined when tracing is off. The OpenTelemetry SDK and exporter are loaded
 * only here, only when configured: without an endpoint they cost no memory and no CPU. A failed
 * export goes to `report` (a warn line at most once a minute, and the failures counter).
 */
export async function openTracer (settings: TraceSettings | undefined, report: ExportFailureReport): Promise<Tracer | undefined> {
  if (settings === undefined) return undefined
  try {
    const [{ OtelTracer }, { ReportingExporter }] = await Promise.all([import('./otel-tracer.ts'), import('./export-failures.ts')])
    // only the exporter of the protocol in use is loaded
    const { OTLPTraceExporter } = settings.protocol === 'http/json'
      ? await import('@opentelemetry/exporter-trace-otlp-http')
      : await import('@opentelemetry/exporter-trace-otlp-proto')
    const exporter = new OTLPTraceExporter({ url: settings.endpoint.href })
    return new OtelTracer(settings, new ReportingExporter(exporter, settings.endpoint.href, report))
  } catch (error) {
    throw notInstalled(error) ?? error
  }
}

/**
 * The OpenTelemetry packages are optional peers of the sidecar's package: its own install leaves
 * them out (the image has them). Setting the endpoint without them is a configuration error.
 */
function notInstalled (error: unknown): ConfigError | undefined {
  const { code, message } = error as NodeJS.ErrnoException
  if (code !== 'ERR_MODULE_NOT_FOUND' || !message.includes('@opentelemetry/')) return undefined
  return new ConfigError('OTEL_EXPORTER_OTLP_ENDPOINT',
    `tracing needs the OpenTelemetry packages, which the sidecar's install leaves out: npm install ${peerInstallArguments('@opentelemetry/')}`)
}
