import { collectProcessMetrics, Counter, Gauge, Registry } from './prom-core.ts'
import { FastHistogram, type HistogramCell } from './fast-histogram.ts'
import { LastReading } from './last-reading.ts'

import type { AppCancelOutcome, CancelCause, InterruptionReason, LabelledCounter, StreamMetrics, WebhookMetrics } from '../shared/metric-contracts.ts'


export type RouteLabel = 'invoke' | 'websocket' | 'management'

const CANCEL_CAUSES: readonly CancelCause[] = ['caller', 'deadline', 'queue_ttl', 'request']
const APP_CANCEL_OUTCOMES: readonly AppCancelOutcome[] = ['sent', 'failed']
const INTERRUPTION_REASONS: readonly InterruptionReason[] = ['replica stopped', 'replica lost', 'app unreachable']

/** The sidecar's Prometheus metrics, in a registry of its own (one per sidecar instance). */
export class SidecarMetrics implements StreamMetrics, WebhookMetrics {
  readonly registry = new Registry()
  /** Requests answered since the last scrape, per `route:code` (added to the counter as it is read). */
  readonly #answered = new Map<string, { route: RouteLabel, code: string, count: number }>()
  /** Requests in flight to the app and waiting for a slot (the gate's counts, read at scrape time). */
  #inflight = 0
  #queued = 0

  constructor () {
    collectProcessMetrics(this.registry)
    const answered = this.#answered
    new Counter({
      name: 'sidecar_requests_total',
      help: 'Requests answered, by route and exact status code',
      labelNames: ['route', 'code'] as const,
      registers: [this.registry],
      collect () {
        for (const pending of answered.values()) {
          if (pending.count === 0) continue
          this.inc({ route: pending.route, code: pending.code }, pending.count)
          pending.count = 0
        }
      }
    })
    const inflight = (): number => this.#inflight
    const queued = (): number => this.#queued
    new Gauge({
      name: 'sidecar_inflight_requests',
      help: 'Requests in flight to the app (streams and WebSockets until they end)',
      registers: [this.registry],
      collect () { this.set(inflight()) }
    })
    new Gauge({
      name: 'sidecar_queued_requests',
      help: 'Requests waiting for a concurrency slot or for the app to be ready',
      registers: [this.registry],
      collect () { this.set(queued()) }
    })
    // every cause and outcome shown from the start, at 0: a rate over a series that appears late misses its first count
    for (const cause of CANCEL_CAUSES) this.cancels.labels(cause).inc(0)
    for (const outcome of APP_CANCEL_OUTCOMES) this.appCancelRequests.labels(outcome).inc(0)
    for (const reason of INTERRUPTION_REASONS) this.runRetries.labels(reason).inc(0)
  }

  readonly #requestDuration = new FastHistogram({
    name: 'sidecar_request_duration_seconds',
    help: 'Time from receiving a request to its last byte sent, by route',
    labelName: 'route',
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registry: this.registry
  })

  /** One call's wait for its slot (0 when one was free), in seconds. */
  readonly queueDuration: HistogramCell = new FastHistogram({
    name: 'sidecar_queue_duration_seconds',
    help: 'Wait for a concurrency slot (and for the app\'s first readiness) of the calls that got one',
    buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60],
    registry: this.registry
  }).cell()

  /** Requests in flight to the app went up or down by `delta`. */
  changeInflight (delta: number): void { this.#inflight += delta }
  /** Requests waiting for a slot went up or down by `delta`. */
  changeQueued (delta: number): void { this.#queued += delta }

  readonly sseStreams = new Gauge({
    name: 'sidecar_sse_streams',
    help: 'Server-sent event streams open to callers',
    registers: [this.registry]
  })

  readonly sseEvents = new Counter({
    name: 'sidecar_sse_events_total',
    help: 'Server-sent events sent to callers',
    registers: [this.registry]
  })

  readonly websocketConnections = new Gauge({
    name: 'sidecar_websocket_connections',
    help: 'WebSocket connections open through the sidecar',
    registers: [this.registry]
  })

  readonly webhookAttempts = new Counter({
    name: 'sidecar_webhook_attempts_total',
    help: 'Webhook delivery attempts, by outcome',
    labelNames: ['outcome'] as const,
    registers: [this.registry]
  })

  readonly webhookDeliveries = new Counter({
    name: 'sidecar_webhook_deliveries_total',
    help: 'Webhook deliveries finished, by result',
    labelNames: ['result'] as const,
    registers: [this.registry]
  })

  /** Exceptions nobody expected, caught in a background path or by the process guard (each also logged once). */
  readonly internalErrors = new Counter({
    name: 'sidecar_internal_errors_total',
    help: 'Exceptions nobody expected, contained (a background path, a store write, the process guard): each failed one run at most',
    registers: [this.registry]
  })

  /** Span exports that failed (tracing on): their spans are lost; each is also logged, at most once a minute. */
  readonly traceExportFailures = new Counter({
    name: 'sidecar_trace_export_failures_total',
    help: 'Span exports to the OTLP collector that failed (down, refused, or answering an error); their spans are lost',
    registers: [this.registry]
  })

  readonly runsTotal = new Counter({
    name: 'sidecar_runs_total',
    help: 'Recorded runs (async) that ended, by final status',
    labelNames: ['status'] as const,
    registers: [this.registry]
  })

  /** Calls and runs canceled, by why: a cancel through `_runs/{id}/cancel`, a caller who left, a deadline, the async queue's time-to-live. */
  readonly cancels: LabelledCounter<CancelCause> = new Counter({
    name: 'sidecar_cancels_total',
    help: 'Calls and runs canceled, by cause (request: _runs/{id}/cancel; caller: the caller left; deadline; queue_ttl)',
    labelNames: ['cause'] as const,
    registers: [this.registry]
  })

  /** Async runs put back in the queue after an interrupted attempt (RUN_MAX_ATTEMPTS), by why, counted by the sidecar that put it back. */
  readonly runRetries: LabelledCounter<InterruptionReason> = new Counter({
    name: 'sidecar_run_retries_total',
    help: 'Async runs queued again for another attempt after an interrupted one, by reason (replica stopped, replica lost, app unreachable)',
    labelNames: ['reason'] as const,
    registers: [this.registry]
  })

  /** APP_CANCEL_PATH requests, by outcome: the app answered 2xx (sent), or not (failed). */
  readonly appCancelRequests: LabelledCounter<AppCancelOutcome> = new Counter({
    name: 'sidecar_app_cancel_requests_total',
    help: 'POSTs to APP_CANCEL_PATH after an app request was aborted, by outcome (sent: the app answered 2xx; failed)',
    labelNames: ['outcome'] as const,
    registers: [this.registry]
  })

  /**
   * Feeds sidecar_async_queued_runs and sidecar_async_running_runs from the run store at each
   * scrape, and sidecar_run_store_up from `up`. A scrape never waits on the store: while it is
   * down, or slower than LastReading's wait, the last counts stay.
   */
  watchAsyncQueue (queued: () => Promise<number>, running: () => Promise<number>, up: () => boolean = () => true): void {
    const waiting = new LastReading(queued, 0)
    const inProgress = new LastReading(running, 0)
    new Gauge({
      name: 'sidecar_async_queued_runs',
      help: 'Async runs waiting in the run store for this app, not running (every replica sharing it)',
      registers: [this.registry],
      async collect () { if (up()) this.set(await waiting.value()) }
    })
    new Gauge({
      name: 'sidecar_async_running_runs',
      help: 'Async runs of this app in progress on any replica sharing the run store',
      registers: [this.registry],
      async collect () { if (up()) this.set(await inProgress.value()) }
    })
    new Gauge({
      name: 'sidecar_run_store_up',
      help: 'Whether the run store answers (1) or not (0); the memory store always does',
      registers: [this.registry],
      collect () { this.set(up() ? 1 : 0) }
    })
  }

  /** Feeds sidecar_app_ready from the app's ready check at each scrape (the alert "app not ready" reads it). */
  watchReadiness (ready: () => boolean): void {
    new Gauge({
      name: 'sidecar_app_ready',
      help: 'Whether the app passes its ready check (READYCHECK_PATH, else a TCP connect): 1, or 0',
      registers: [this.registry],
      collect () { this.set(ready() ? 1 : 0) }
    })
  }

  /** Feeds sidecar_busiest_caller_inflight from the gate at each scrape. */
  watchCallers (busiest: () => number): void {
    new Gauge({
      name: 'sidecar_busiest_caller_inflight',
      help: 'Calls at the app (sync, streams, async runs, WebSockets) of the caller with the most, at this replica',
      registers: [this.registry],
      collect () { this.set(busiest()) }
    })
  }

  /** Feeds sidecar_async_queued_runs_by_urgency from the memory queue's counts (index: urgency 0–7) at each scrape. */
  watchQueuedByUrgency (byUrgency: () => Promise<readonly number[]>, up: () => boolean): void {
    const reading = new LastReading(byUrgency, [])
    new Gauge({
      name: 'sidecar_async_queued_runs_by_urgency',
      help: 'Async runs waiting for their turn in the run store, by Priority urgency (0 most urgent to 7)',
      labelNames: ['urgency'] as const,
      registers: [this.registry],
      async collect () {
        if (!up()) return
        const counts = await reading.value()
        for (let urgency = 0; urgency < counts.length; urgency++) this.set({ urgency: String(urgency) }, counts[urgency] as number)
      }
    })
  }

  /** Feeds the autoscaling gauges from `stats`; `limit` is REPLICA_CONCURRENCY (0: none). */
  watchConcurrency (stats: { averageConcurrency: () => number, requestsPerSecond: () => number }, limit: number): void {
    new Gauge({
      name: 'sidecar_average_concurrency',
      help: 'Requests in flight to the app, time-weighted average over the last 10 s',
      registers: [this.registry],
      collect () { this.set(stats.averageConcurrency()) }
    })
    new Gauge({
      name: 'sidecar_requests_per_second',
      help: 'Requests admitted to the app per second, over the last 10 s',
      registers: [this.registry],
      collect () { this.set(stats.requestsPerSecond()) }
    })
    new Gauge({
      name: 'sidecar_concurrency_utilization',
      help: 'Average concurrency over the last 10 s divided by REPLICA_CONCURRENCY (0 when there is no limit)',
      registers: [this.registry],
      collect () { this.set(limit > 0 ? stats.averageConcurrency() / limit : 0) }
    })
  }

  /** Counts one answered request and its duration. */
  recordRequest (route: RouteLabel, code: number, seconds: number): void {
    const key = `${route}:${code}`
    const answered = this.#answered.get(key)
    if (answered === undefined) this.#answered.set(key, { route, code: String(code), count: 1 })
    else answered.count++
    this.#requestDuration.cell(route).observe(seconds)
  }
}
