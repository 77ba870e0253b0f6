import { randomUUID } from 'node:crypto'
import type { DurableDeliveries } from '../durable-deliveries.ts'
import type { HeldDelivery, NewDelivery } from '../../run-data.ts'
import { LEFT, LOOK_NOW } from './redis-due.ts'
import { guard, type RedisContext, ScopeKeys, scopeOfQueue } from './redis-context.ts'
import type { FieldsOf } from './redis-named-script.ts'
import { DELIVERY_DONE, DROP_ENTRY, HOLD_DELIVERY, SENDERS } from './redis-scripts.ts'
import { LEAVE_DELIVERY } from './redis-due-scripts.ts'

/** How long a delivery is kept at most, should every sidecar that could finish it be gone (a day). */
const DELIVERY_TTL_SECONDS = 86_400

/**
 * Durable webhook deliveries in Redis: a stream per app (consumer group SENDERS) whose entries
 * this sidecar holds as it holds runs, and a hash per delivery (its body, secret and attempts).
 */
export class RedisDeliveries implements DurableDeliveries {
  readonly #ctx: RedisContext
  /** Deliveries are being left (SIGTERM): this store takes none over any more, its own included. */
  #leaving = false

  constructor (ctx: RedisContext) {
    this.#ctx = ctx
  }

  async hold (delivery: NewDelivery): Promise<HeldDelivery> {
    const writing = holdDelivery(this.#ctx, delivery)
    return writing.held(await guard(HOLD_DELIVERY.call(this.#ctx.redis, writing.fields)))
  }

  async attempt (delivery: HeldDelivery): Promise<void> {
    const [, id] = delivery.entry.split(' ') as [string, string]
    await guard(this.#ctx.redis.hincrby(new ScopeKeys(delivery.scope).delivery(id), 'attempts', 1))
  }

  async done (delivery: HeldDelivery): Promise<void> {
    const keys = new ScopeKeys(delivery.scope)
    const [entry, id] = delivery.entry.split(' ') as [string, string]
    // held (its claim renewed by the heartbeat) until its end is written: no other sidecar takes it over meanwhile
    await guard(DELIVERY_DONE.call(this.#ctx.redis, { deliveriesStream: keys.deliveries, deliveryHash: keys.delivery(id), entryId: entry }))
    this.#ctx.lease.held.delete(entry)
  }

  /** This sidecar is stopping: it takes no delivery over (another does). */
  get leaving (): boolean { return this.#leaving }

  async leave (delivery: HeldDelivery, stopping: boolean): Promise<void> {
    const keys = new ScopeKeys(delivery.scope)
    const [entry] = delivery.entry.split(' ') as [string, string]
    this.#ctx.lease.held.delete(entry)
    if (stopping) this.#leaving = true
    // idle as long as a lost sidecar's, and due at once: the next sidecar to look takes it over
    await guard(LEAVE_DELIVERY.call(this.#ctx.redis, {
      deliveriesStream: keys.deliveries, dueSet: keys.expiry,
      group: SENDERS, consumer: this.#ctx.consumer, entry, idleMs: this.#ctx.lostAfterMs + 1, member: `${LEFT}${entry}`
    }))
    this.#ctx.dueAt?.(Date.now())
    // stopping, this sidecar takes none over: the others are told to look now
    if (stopping) await this.#ctx.publishOn(keys.cancel, LOOK_NOW)
  }

  /** Deliveries of lost (or stopped) sidecars: this one holds them now and makes their remaining attempts (the heartbeat's reaper). */
  async reap (keys: ScopeKeys): Promise<void> {
    if (this.#leaving) return
    const { redis } = this.#ctx
    const reply = await redis.call('XAUTOCLAIM', keys.deliveries, SENDERS, this.#ctx.consumer, this.#ctx.lostAfterMs, '0-0', 'COUNT', 100)
      .catch(() => undefined) as [string, Array<[string, string[] | null]>] | undefined
    if (reply === undefined) return
    const scope = scopeOfQueue(keys.queue)
    for (const [entry, fields] of reply[1]) {
      const id = fields?.[1]
      const stored = id === undefined ? {} : await redis.hgetall(keys.delivery(id))
      if (id === undefined || stored.run === undefined || stored.url === undefined || stored.body === undefined) {
        await DROP_ENTRY.call(redis, { stream: keys.deliveries, group: SENDERS, entry })
        continue
      }
      this.#ctx.lease.held.set(entry, keys.deliveries)
      this.#ctx.listener?.deliveryLost?.({
        scope,
        runId: stored.run,
        target: { url: new URL(stored.url), secret: stored.secret },
        body: stored.body,
        trace: stored.traceparent === undefined ? undefined : { traceparent: stored.traceparent, tracestate: stored.tracestate === '' ? undefined : stored.tracestate },
        attempts: Number(stored.attempts ?? 0),
        entry: `${entry} ${id}`
      })
    }
  }
}

/**
 * How a delivery is written down (HOLD_DELIVERY's fields, alone or after a run's end in the same
 * step) and, given the entry the script returns, the delivery as this sidecar holds it.
 */
export function holdDelivery (ctx: RedisContext, delivery: NewDelivery, id: string = randomUUID()): {
  fields: FieldsOf<typeof HOLD_DELIVERY>
  held: (entry: string) => HeldDelivery
} {
  const keys = new ScopeKeys(delivery.scope)
  const fields: FieldsOf<typeof HOLD_DELIVERY> = {
    deliveriesStream: keys.deliveries, deliveryHash: keys.delivery(id),
    runId: delivery.runId, url: delivery.target.url.href, body: delivery.body, secret: delivery.target.secret ?? '', consumer: ctx.consumer,
    ttlSeconds: DELIVERY_TTL_SECONDS, deliveryId: id, traceparent: delivery.trace?.traceparent ?? '', tracestate: delivery.trace?.tracestate ?? ''
  }
  return {
    fields,
    held: entry => {
      ctx.lease.held.set(entry, keys.deliveries)
      return { ...delivery, attempts: 0, entry: `${entry} ${id}` }
    }
  }
}

/** The id of the delivery written with a run's end (END_AND_HOLD): one per run, so that an end tried again finds it. */
export function endDeliveryId (runId: string): string { return `end:${runId}` }

/**
 * The delivery this sidecar wrote with a run's end, as it holds it, when the end's reply was lost
 * (its hash keeps the stream entry); undefined when there is none (or it is no longer this sidecar's).
 */
export async function heldEndDelivery (ctx: RedisContext, delivery: NewDelivery): Promise<HeldDelivery | undefined> {
  const keys = new ScopeKeys(delivery.scope)
  const id = endDeliveryId(delivery.runId)
  const entry = await guard(ctx.redis.hget(keys.delivery(id), 'entry'))
  return entry === null ? undefined : holdDelivery(ctx, delivery, id).held(entry)
}
