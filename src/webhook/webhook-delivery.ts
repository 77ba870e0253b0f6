import { AbortError } from 'p-retry'
import type { Logger } from 'pino'
import { buildConnector } from '../shared/undici-core.ts'
import type { WebhookAttemptOutcome, WebhookMetrics } from '../shared/metric-contracts.ts'
import { describeNetworkError, isNetworkTimeout } from '../shared/network-errors.ts'
import { retryAfterFirst } from '../shared/retry-after-first.ts'
import { portOf, type TraceContext, type Tracer } from '../shared/trace-contracts.ts'
import { type AddressGuard, AddressRefusedError } from './address-guard.ts'
import { DestinationPools } from './destination-pools.ts'
import { WebhookAttempt } from './webhook-attempt.ts'
import type { WebhookTarget } from './webhook-endpoint.ts'
import { signStandardWebhook } from './standard-webhook-signature.ts'
import { signatureHeaderNames, signWebhook } from './webhook-signature.ts'

/** One webhook to deliver. */
export interface WebhookJob {
  /** Where it goes, and the caller's `X-Webhook-Secret` when it sent one: each attempt is then signed. */
  readonly target: WebhookTarget
  readonly runId: string
  readonly body: string
  /** Told how the delivery ended and how many attempts it made (a recorded run keeps them). */
  readonly onEnd?: (result: DeliveryResult | 'dropped', attempts: number) => void
  /** The app the call belongs to (where a durable delivery is written down). */
  readonly scope?: { readonly projectId: string, readonly appName: string }
  /** Where the delivery is written down (durable delivery): told of each attempt and of its end. */
  readonly ledger?: DeliveryLedger
  /** The trace the delivery continues (the call's or the run's): each attempt carries it, as its own client span's with tracing on. */
  readonly trace?: TraceContext | undefined
}

/** A delivery written down in a shared store, so that another sidecar can finish it. Never rejects. */
export interface DeliveryLedger {
  /** Attempts another sidecar already made (a delivery taken over): only the rest are made. */
  readonly attemptsMade: number
  /** An attempt begins. */
  attempt: () => Promise<void>
  /** The delivery ended: delivered, or failed for good. */
  done: () => Promise<void>
  /** The sender stopped first (`stopping`: the grace period is over), or its bounds are full: another sidecar (or this one, later) takes it over. */
  leave: (stopping: boolean) => Promise<void>
}

/** Anything that takes webhooks to deliver (the sender, or the durable layer in front of it). */
export interface WebhookSubmitter {
  /** Starts delivering `job` in the background; false when it was dropped. */
  submit: (job: WebhookJob) => boolean
}

export interface DeliverySettings {
  readonly attempts: number
  readonly maxDelayMs: number
  readonly timeoutMs: number
  readonly brand: string
  /** Also send the Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`). */
  readonly standardHeaders?: boolean
  readonly guard: AddressGuard
  readonly metrics: WebhookMetrics
  readonly logger: Logger
  /** Makes a client span per attempt (tracing on). */
  readonly tracer?: Tracer | undefined
}

/** How one attempt ended: its metrics label, the words for the log, and whether to try again. */
class AttemptOutcome extends Error {
  readonly outcome: WebhookAttemptOutcome
  readonly retry: boolean
  /** A refused address: which range refused it, and what would allow it (for the failure's log line). */
  readonly refused: AddressRefusedError | undefined
  constructor (outcome: WebhookAttemptOutcome, detail: string, retry: boolean, refused?: AddressRefusedError) {
    super(detail)
    this.outcome = outcome
    this.retry = retry
    this.refused = refused
  }
}

/** The seed's retry table: what a status means for the next step. */
/** A delivered attempt: shared, since building an Error (and its stack) per success is wasted work. */
const DELIVERED = new AttemptOutcome('2xx', 'delivered', false)

function outcomeOfStatus (status: number): AttemptOutcome {
  if (status >= 200 && status < 300) return DELIVERED
  const detail = `status ${status}`
  if (status === 404) return new AttemptOutcome('404', detail, true)
  if (status >= 400 && status < 500) return new AttemptOutcome('4xx', detail, false)
  if (status >= 500) return new AttemptOutcome('5xx', detail, false)
  return new AttemptOutcome('other', detail, true) // 1xx, 3xx: redirects are never followed
}

export type DeliveryResult = 'delivered' | 'failed' | 'shutdown'

/**
 * Delivers webhooks: POSTs with undici through a pool per destination whose connections check the
 * destination address (a bounded number per destination, see destination-pools.ts), retried with
 * p-retry by the seed's rules, each attempt signed afresh.
 */
export class WebhookDelivery {
  readonly #settings: DeliverySettings
  readonly #pools: DestinationPools
  readonly #names: { timestamp: string, signature: string }
  /** The attempts under way, per shutdown signal: one listener on it aborts them all. */
  readonly #underWay = new WeakMap<AbortSignal, Set<WebhookAttempt>>()

  constructor (settings: DeliverySettings) {
    this.#settings = settings
    this.#names = signatureHeaderNames(settings.brand)
    this.#pools = new DestinationPools(buildConnector({ lookup: settings.guard.lookup, timeout: settings.timeoutMs }), {
      headersTimeout: settings.timeoutMs,
      bodyTimeout: settings.timeoutMs,
      keepAliveTimeout: 10_000
    })
  }

  /** Delivers one job; never rejects. `signal` aborts it (the drain's grace period is over). */
  async deliver (job: WebhookJob, signal: AbortSignal): Promise<DeliveryResult> {
    const { maxDelayMs, metrics, logger } = this.#settings
    const ledger = job.ledger
    const before = ledger?.attemptsMade ?? 0
    const attempts = Math.max(1, this.#settings.attempts - before)
    let made = before
    let last: AttemptOutcome | undefined
    const attemptOnce = async (): Promise<void> => {
      made++
      if (ledger !== undefined) await ledger.attempt()
      const outcome = await this.#attempt(job, signal, made)
      metrics.webhookAttempts.labels(outcome.outcome).inc()
      if (outcome === DELIVERED) return
      last = outcome
      throw outcome.retry ? outcome : new AbortError(outcome)
    }
    try {
      // the first attempt goes out directly: most deliveries need no other
      signal.throwIfAborted()
      await retryAfterFirst(attemptOnce, {
        retries: attempts - 1,
        factor: 2,
        minTimeout: Math.min(250, maxDelayMs),
        maxTimeout: maxDelayMs,
        randomize: maxDelayMs > 0,
        signal
      })
      metrics.webhookDeliveries.labels('delivered').inc()
      if (ledger !== undefined) await ledger.done()
      job.onEnd?.('delivered', made)
      return 'delivered'
    } catch {
      const shutdown = signal.aborted
      if (shutdown && ledger !== undefined) {
        // a durable delivery cut by the shutdown is not over: another sidecar makes its remaining attempts
        logger.info({ runId: job.runId, host: job.target.url.host, attempts: made }, 'webhook left for another replica')
        await ledger.leave(true)
        return 'shutdown'
      }
      metrics.webhookDeliveries.labels('failed').inc()
      const refused = shutdown ? undefined : last?.refused
      logger.warn({
        runId: job.runId,
        host: job.target.url.host,
        attempts: made,
        outcome: shutdown ? 'shutdown' : (last?.message ?? 'unknown'),
        // a refused address says which range refused it, and that WEBHOOK_ALLOWED_CIDRS would allow it
        ...(refused === undefined ? {} : { address: refused.address, range: refused.range, hint: refused.hint })
      }, 'webhook failed')
      const result = shutdown ? 'shutdown' : 'failed'
      if (ledger !== undefined) await ledger.done()
      job.onEnd?.(result, made)
      return result
    }
  }

  /** Attempt number `n` of `job`'s delivery. */
  async #attempt (job: WebhookJob, signal: AbortSignal, n: number): Promise<AttemptOutcome> {
    const headers: Record<string, string> = { 'content-type': 'application/json', 'x-request-id': job.runId, 'user-agent': 'app-sidecar-webhook' }
    const span = this.#settings.tracer?.startClient('POST', job.trace, {
      'http.request.method': 'POST', 'server.address': job.target.url.hostname, 'server.port': portOf(job.target.url), 'url.full': job.target.url.origin + job.target.url.pathname,
      'http.request.resend_count': n - 1, run_id: job.runId
    })
    const trace = span?.context ?? job.trace
    if (trace !== undefined) {
      headers.traceparent = trace.traceparent
      if (trace.tracestate !== undefined && trace.tracestate !== '') headers.tracestate = trace.tracestate
    }
    if (job.target.secret !== undefined) {
      const timestamp = Math.floor(Date.now() / 1000)
      headers[this.#names.timestamp] = String(timestamp)
      headers[this.#names.signature] = signWebhook(job.target.secret, job.runId, timestamp, job.body)
      if (this.#settings.standardHeaders === true) {
        headers['webhook-id'] = job.runId
        headers['webhook-timestamp'] = String(timestamp)
        headers['webhook-signature'] = signStandardWebhook(job.target.secret, job.runId, timestamp, job.body)
      }
    }
    // Cut by its time limit or by the sender's shutdown signal. The shutdown signal gets one
    // listener for all attempts, not one each: an EventTarget looks through its listeners on every
    // add (O(n) per attempt with n under way), and AbortSignal.any([signal, …]) leaves an entry on
    // it for good on Node 20 (nodejs/node#55351).
    const attempt = new WebhookAttempt(this.#settings.timeoutMs)
    const underWay = this.#attemptsUnder(signal)
    underWay.add(attempt)
    if (signal.aborted) attempt.cut(signal.reason)
    try {
      this.#settings.guard.checkLiteralHost(job.target.url.hostname)
      const turn = this.#pools.acquire(job.target.url.origin, attempt)
      const { pool, release } = turn instanceof Promise ? await turn : turn
      if (attempt.isCut) { release(); throw attempt.reason }
      const status = await attempt.send(pool, release, { path: job.target.url.pathname + job.target.url.search, headers, body: job.body })
      span?.end(status)
      return outcomeOfStatus(status)
    } catch (error) {
      const outcome = classify(error, attempt.timedOut)
      span?.end(0, outcome.message)
      return outcome
    } finally {
      attempt.end()
      underWay.delete(attempt)
    }
  }

  /** The attempts under way that `signal` cuts when it aborts. */
  #attemptsUnder (signal: AbortSignal): Set<WebhookAttempt> {
    let underWay = this.#underWay.get(signal)
    if (underWay === undefined) {
      const attempts = new Set<WebhookAttempt>()
      signal.addEventListener('abort', () => { for (const attempt of attempts) attempt.cut(signal.reason) }, { once: true })
      this.#underWay.set(signal, attempts)
      underWay = attempts
    }
    return underWay
  }

  async close (): Promise<void> {
    await this.#pools.close()
  }
}

/** A failed connection or exchange: refused addresses stop at once, everything else retries. */
function classify (error: unknown, timedOut: boolean): AttemptOutcome {
  const cause = (error as { cause?: unknown }).cause
  const refused = error instanceof AddressRefusedError ? error : cause instanceof AddressRefusedError ? cause : undefined
  if (refused !== undefined) return new AttemptOutcome('refused', 'address refused', false, refused)
  if (timedOut || isNetworkTimeout(error as Error)) return new AttemptOutcome('timeout', 'timeout', true)
  return new AttemptOutcome('network', describeNetworkError(error as Error), true)
}
