import type { Server } from 'node:http'
import type { Logger } from 'pino'
import type { InflightTracker } from '../lifecycle/inflight-tracker.ts'
import type { WebhookSender } from '../webhook/webhook-sender.ts'

/** What a drain waits for and then closes. */
export interface DrainParts {
  readonly logger: Logger
  /** The public listener: it stops accepting once the calls are quiet. */
  readonly server: Server
  readonly inflight: InflightTracker
  readonly webhooks: WebhookSender
  /** Async runs: resolves true once they are done or handed on, false when `graceOver` came first. */
  readonly drainRuns: (graceOver: Promise<false>) => Promise<boolean>
  /** Closes everything at once. */
  readonly close: () => Promise<void>
}

/** How long a drain waits for a call to arrive, once nothing is in flight, before it ends. */
const DRAIN_QUIET_MS = 500

const delay = async (ms: number): Promise<void> => { await new Promise(resolve => setTimeout(resolve, ms)) }

/**
 * SIGTERM (the caller has already turned /readyz to 503): in-flight work gets `graceSeconds`, then
 * everything closes. True when nothing was cut.
 */
export async function drainSidecar (parts: DrainParts, graceSeconds: number): Promise<boolean> {
  const { logger, inflight, webhooks } = parts
  logger.info({ inflight: inflight.count, webhooks: webhooks.pending, graceSeconds }, 'draining')
  let timer: NodeJS.Timeout | undefined
  const graceOver = new Promise<false>(resolve => { timer = setTimeout(resolve, graceSeconds * 1000, false) })
  // async runs: with a shared store, queued ones stay for the other replicas; in memory they run now
  const runsDone = parts.drainRuns(graceOver)
  // nothing left at the end of the grace period counts as done too
  const requestsDone = (await Promise.race([quiet(parts, graceOver), graceOver]) || inflight.count === 0) && await runsDone
  if (!requestsDone) logger.warn({ inflight: inflight.count }, 'grace period over; cutting what is left')
  // the last calls' webhooks were handed over as they ended; they get what is left of the grace period
  const webhooksDone = await webhooks.drain(requestsDone ? graceOver : Promise.resolve())
  clearTimeout(timer)
  await parts.close()
  return requestsDone && webhooksDone
}

/**
 * New calls are still served while the platform stops routing: a drain ends once nothing is in
 * flight and no call has arrived for DRAIN_QUIET_MS (not the first instant the count touches 0,
 * which under steady load happens between two calls). Then the public listener stops accepting
 * and the calls that slipped in on kept-alive connections meanwhile may finish. False if
 * `graceOver` comes first.
 */
async function quiet ({ server, inflight }: DrainParts, graceOver: Promise<false>): Promise<boolean> {
  let over = false
  void graceOver.then(() => { over = true })
  while (!over) {
    await inflight.idle()
    const began = inflight.began
    await Promise.race([delay(DRAIN_QUIET_MS), graceOver])
    if (over || inflight.count > 0 || inflight.began !== began) continue
    server.close() // stops accepting; idle kept-alive connections are closed with it
    await inflight.idle()
    return true
  }
  return false
}
