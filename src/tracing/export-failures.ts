import { performance } from 'node:perf_hooks'
import { type ExportResult, ExportResultCode } from '@opentelemetry/core'
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace'
import type { Logger } from 'pino'
import type { CounterLike } from '../shared/metric-contracts.ts'
import { describeNetworkError } from '../shared/network-errors.ts'

/** Where failed span exports are reported: a warn line at most once per `intervalMs`, and every one counted. */
export interface ExportFailureReport {
  readonly logger: Logger
  /** sidecar_trace_export_failures_total */
  readonly failures: CounterLike
  /** Least time between two warn lines (default: one minute). */
  readonly intervalMs?: number
}

/** One warn line a minute at most: a collector that is down fails every export. */
const LOG_INTERVAL_MS = 60_000

/**
 * Wraps the OTLP exporter so a failed export is not silent (the batch processor drops its spans
 * and tells no one): each is counted, and a warn line names the endpoint and the cause, at most
 * once a minute, with how many exports failed since the last line. Calls never wait on any of it.
 */
export class ReportingExporter implements SpanExporter {
  readonly #inner: SpanExporter
  readonly #endpoint: string
  readonly #report: ExportFailureReport
  readonly #intervalMs: number
  /** When the last line was written (performance time); -Infinity before the first. */
  #loggedAt = -Infinity
  /** Failed exports since the last line (the next line counts them too). */
  #unlogged = 0

  constructor (inner: SpanExporter, endpoint: string, report: ExportFailureReport) {
    this.#inner = inner
    this.#endpoint = endpoint
    this.#report = report
    this.#intervalMs = report.intervalMs ?? LOG_INTERVAL_MS
  }

  export (spans: ReadableSpan[], resultCallback: (result: ExportResult) => void): void {
    this.#inner.export(spans, result => {
      if (result.code !== ExportResultCode.SUCCESS) this.#failed(result.error, spans.length)
      resultCallback(result)
    })
  }

  async shutdown (): Promise<void> { await this.#inner.shutdown() }

  async forceFlush (): Promise<void> { await this.#inner.forceFlush?.() }

  #failed (error: Error | undefined, spans: number): void {
    this.#report.failures.inc()
    this.#unlogged++
    const now = performance.now()
    if (now - this.#loggedAt < this.#intervalMs) return
    this.#loggedAt = now
    this.#report.logger.warn({
      endpoint: this.#endpoint,
      cause: describeExportError(error),
      spans,
      failures: this.#unlogged
    }, 'trace export failed')
    this.#unlogged = 0
  }
}

/** Why an export failed, in a few words: the collector's HTTP status, or the network error. */
export function describeExportError (error: Error | undefined): string {
  if (error === undefined) return 'unknown'
  // the exporter's OTLPExporterError carries the HTTP status as a numeric code
  const code = (error as { code?: unknown }).code
  if (typeof code === 'number') return error.message === '' ? `status ${code}` : `status ${code} ${error.message}`
  return describeNetworkError(error)
}
