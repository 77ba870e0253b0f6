import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

import type { StreamMetrics, WebhookMetrics } from '../shared/metric-contracts.ts'

export type RouteLabel = 'invoke' | 'websocket' | 'management'

/** The sidecar's Prometheus metrics, in a registry of its own (one per sidecar instance). */
export class SidecarMetrics implements StreamMetrics, WebhookMetrics {
  readonly registry = new Registry()
  readonly requests = new Counter({
    name: 'sidecar_requests_total',
    help: 'Requests answered, by route and exact status code',
    labelNames: ['route', 'code'] as const,
    registers: [this.registry]
  })

  readonly requestDuration = new Histogram({
    name: 'sidecar_request_duration_seconds',
    help: 'Time from receiving a request to its last byte sent, by route',
    labelNames: ['route'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry]
  })

  readonly queueDuration = new Histogram({
    name: 'sidecar_queue_duration_seconds',
    help: 'Wait for a concurrency slot (and for the app\'s first readiness) of the calls that got one',
    buckets: [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [this.registry]
  })

  readonly inflight = new Gauge({
    name: 'sidecar_inflight_requests',
    help: 'Requests in flight to the app (streams and WebSockets until they end)',
    registers: [this.registry]
  })

  readonly queued = new Gauge({
    name: 'sidecar_queued_requests',
    help: 'Requests waiting for a concurrency slot or for the app to be ready',
    registers: [this.registry]
  })

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

  readonly runsTotal = new Counter({
    name: 'sidecar_runs_total',
    help: 'Recorded runs (async) that ended, by final status',
    labelNames: ['status'] as const,
    registers: [this.registry]
  })

  /** Feeds sidecar_async_queued_runs from the run store at each scrape (the last count stays while it cannot be reached). */
  watchAsyncQueue (queued: () => Promise<number>): void {
    new Gauge({
      name: 'sidecar_async_queued_runs',
      help: 'Async runs waiting in the run store for this app (every replica sharing it)',
      registers: [this.registry],
      async collect () {
        try {
          this.set(await queued())
        } catch {}
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

  /** Children per (route, code), so the hot path skips prom-client's label hashing. */
  readonly #requestChildren = new Map<string, Counter.Internal>()
  readonly #durationChildren = new Map<RouteLabel, Histogram.Internal<'route'>>()

  constructor () {
    collectDefaultMetrics({ register: this.registry })
  }

  /** Counts one answered request and its duration. */
  recordRequest (route: RouteLabel, code: number, seconds: number): void {
    const key = `${route}:${code}`
    let counter = this.#requestChildren.get(key)
    if (counter === undefined) {
      counter = this.requests.labels(route, String(code))
      this.#requestChildren.set(key, counter)
    }
    counter.inc()
    let histogram = this.#durationChildren.get(route)
    if (histogram === undefined) {
      histogram = this.requestDuration.labels(route)
      this.#durationChildren.set(route, histogram)
    }
    histogram.observe(seconds)
  }
}
