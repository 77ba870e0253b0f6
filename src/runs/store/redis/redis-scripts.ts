import type { KeyEntry } from '../../run-data.ts'
import type { LuaScript } from './redis-lua-script.ts'
import { arrayReply, codeReply, defineScript, integerReply, luaFunction, textReply, textsReply, unexpectedReply } from './redis-named-script.ts'
import { TAKE } from './redis-queue-scripts.ts'
import { LEASE_BEAT, LEAVE_DELIVERY, LOOK_DUE, LOST_CLAIMS } from './redis-due-scripts.ts'

// The run store's scripts, each in lua/<kebab-name>.lua with its KEYS, ARGV and replies in its
// header; the queue's are in redis-queue-scripts.ts, the due set's in redis-due-scripts.ts, the
// listing's in redis-list-scripts.ts.

/**
 * Moves a run from the record it had to a new one, compare and set, with its result, owner,
 * entry, retention and followers' message (lua/transition.lua): whether it moved. END_AND_HOLD,
 * END_AND_TAKE and CANCEL_QUEUED run it as a function.
 */
export const TRANSITION = defineScript({
  name: 'TRANSITION',
  keys: ['run', 'queue', 'events', 'queuedBytes', 'oldRunningSet', 'expiry', 'turns', 'index'],
  args: ['oldRecord', 'newRecord', 'result', 'owner', 'entry', 'ttlSeconds', 'liveChannel', 'message', 'runId', 'indexCutoffMs'],
  reply: reply => codeReply('TRANSITION', reply, [1, 0]) === 1
})

/** A follower listens on the run's live channel: its ends are told there from now on (lua/mark-followed.lua): false when the run is gone. */
export const MARK_FOLLOWED = defineScript({
  name: 'MARK_FOLLOWED',
  keys: ['run'],
  args: [],
  reply: reply => codeReply('MARK_FOLLOWED', reply, [1, 0]) === 1
})

/** A recorded sync call ends, its answer kept in its key's slot (lua/finish-recorded.lua): whether it ended. */
export const FINISH_RECORDED = defineScript({
  name: 'FINISH_RECORDED',
  keys: ['claims', 'index', 'run', 'events', 'slot'],
  args: ['owner', 'newRecord', 'result', 'ttlSeconds', 'liveChannel', 'runId', 'status', 'contentType', 'body', 'answerTtlMs', 'indexCutoffMs'],
  reply: reply => codeReply('FINISH_RECORDED', reply, [1, 0]) === 1,
  batch: { shared: 2 }
})

/** APPEND_EVENT's replies: 1 appended; 0 refused (there already, the run gone, or not the writer's); -1 an event before it missing. */
const APPENDED = { 1: 'appended', 0: 'refused', '-1': 'gap' } as const

/** Appends event n to a run's events, in order (lua/append-event.lua). */
export const APPEND_EVENT = defineScript({
  name: 'APPEND_EVENT',
  keys: ['run', 'events'],
  args: ['entryId', 'data', 'maxEvents', 'liveChannel', 'n', 'maxBytes', 'skip', 'writer'],
  reply: reply => APPENDED[codeReply('APPEND_EVENT', reply, [1, 0, -1])]
})

/** What CLAIM_KEY finds: the slot claimed, the run id taken, a lost sidecar's run, or what the slot holds. */
export type KeyClaimReply =
  | { readonly kind: 'claimed' }
  | { readonly kind: 'run id taken' }
  | { readonly kind: 'lost', readonly runId: string }
  | { readonly kind: 'held', readonly entry: KeyEntry }

/** Claims an Idempotency-Key's slot unless a request holds it (lua/claim-key.lua). */
export const CLAIM_KEY = defineScript({
  name: 'CLAIM_KEY',
  keys: ['claims', 'slot', 'run', 'index'],
  args: ['runId', 'digest', 'async', 'leaseMs', 'record', 'owner', 'webhook', 'recordTtlSeconds', 'createdAtMs', 'lostAfterMs', 'sub'],
  reply: keyClaimReply,
  batch: { shared: 1 },
  buffers: true
})

function keyClaimReply (reply: unknown): KeyClaimReply {
  if (reply === null) return { kind: 'claimed' }
  if (reply === -1) return { kind: 'run id taken' }
  const held = arrayReply('CLAIM_KEY', reply) as ReadonlyArray<Buffer | null>
  if (held.length === 2 && String(held[0]) === 'lost') return { kind: 'lost', runId: textReply('CLAIM_KEY', held[1]) }
  const [runId, digest, async, status, type, body] = held
  if (held.length !== 6 || runId === null || digest === null || async === null) throw unexpectedReply('CLAIM_KEY', reply)
  return {
    kind: 'held',
    entry: {
      runId: String(runId),
      digest: String(digest),
      async: String(async) === '1',
      answer: status === null || status === undefined
        ? undefined
        : { status: Number(String(status)), contentType: type === null || type === undefined || type.length === 0 ? undefined : String(type), body: body ?? Buffer.alloc(0) }
    }
  }
}

/** Ends a lost sidecar's sync run "replica lost", its slot keeping that answer (lua/fail-lost-claim.lua): whether it did. */
export const FAIL_LOST_CLAIM = defineScript({
  name: 'FAIL_LOST_CLAIM',
  keys: ['claims', 'slot', 'run', 'events', 'index'],
  args: ['runId', 'record', 'result', 'ttlSeconds', 'liveChannel', 'status', 'contentType', 'body', 'answerTtlMs', 'lostAfterMs', 'owner', 'indexCutoffMs'],
  reply: reply => codeReply('FAIL_LOST_CLAIM', reply, [1, 0]) === 1
})

/** Records a sync call as a running async run as it goes on (lua/open-run.lua): its queue entry, or undefined when its run id is taken. */
export const OPEN_RUN = defineScript({
  name: 'OPEN_RUN',
  keys: ['run', 'index', 'queue'],
  args: ['record', 'owner', 'webhook', 'ttlSeconds', 'runId', 'createdAtMs', 'request', 'body', 'urgency', 'caller', 'sub'],
  reply: reply => reply === -1 ? undefined : textReply('OPEN_RUN', reply)
})

/** Keeps the answer in the slot the run holds (lua/keep-answer.lua): whether it was kept. */
export const KEEP_ANSWER = defineScript({
  name: 'KEEP_ANSWER',
  keys: ['slot', 'claims'],
  args: ['runId', 'status', 'contentType', 'body', 'ttlMs'],
  reply: reply => codeReply('KEEP_ANSWER', reply, [1, 0]) === 1
})

/** Frees the slot the run holds unless answered, forgetting its run if asked (lua/drop-key.lua): whether it was freed. */
export const DROP_KEY = defineScript({
  name: 'DROP_KEY',
  keys: ['slot', 'run', 'claims'],
  args: ['runId', 'forget'],
  reply: reply => codeReply('DROP_KEY', reply, [1, 0]) === 1
})

/** The run's webhook delivery state, beside its record (lua/webhook-state.lua): false when the run is gone. */
export const WEBHOOK_STATE = defineScript({
  name: 'WEBHOOK_STATE',
  keys: ['run'],
  args: ['status', 'attempts'],
  reply: reply => codeReply('WEBHOOK_STATE', reply, [1, 0]) === 1
})

/** The consumer group every sidecar holds an app's webhook deliveries in. */
export const SENDERS = 'senders'

/** Writes a webhook delivery down, held by this sidecar (lua/hold-delivery.lua; the group named in it is SENDERS): its entry id. */
export const HOLD_DELIVERY = defineScript({
  name: 'HOLD_DELIVERY',
  keys: ['deliveriesStream', 'deliveryHash'],
  args: ['runId', 'url', 'body', 'secret', 'consumer', 'ttlSeconds', 'deliveryId', 'traceparent', 'tracestate'],
  reply: reply => textReply('HOLD_DELIVERY', reply),
  batch: { shared: 1 }
})

/** A delivery ended: its entry acknowledged and deleted, its hash gone (lua/delivery-done.lua): whether its hash was there. */
export const DELIVERY_DONE = defineScript({
  name: 'DELIVERY_DONE',
  keys: ['deliveriesStream', 'deliveryHash'],
  args: ['entryId'],
  reply: reply => codeReply('DELIVERY_DONE', reply, [1, 0]) === 1,
  batch: { shared: 1 }
})

/** Removes consumers that hold no entry from a stream's group (lua/forget-consumers.lua): how many went. */
export const FORGET_CONSUMERS = defineScript({
  name: 'FORGET_CONSUMERS',
  keys: ['stream'],
  args: ['group', 'consumer', 'idleMs'],
  reply: reply => integerReply('FORGET_CONSUMERS', reply)
})

/** The heartbeat renews this sidecar's hold on the entries it still holds, and only those (lua/keep-held.lua): the ids no longer its. */
export const KEEP_HELD = defineScript({
  name: 'KEEP_HELD',
  keys: ['stream'],
  args: ['group', 'consumer', 'ids...'],
  reply: reply => textsReply('KEEP_HELD', reply)
})

/** Renews this sidecar's Idempotency-Key claims still running (lua/renew-claims.lua): the slots no longer its. */
export const RENEW_CLAIMS = defineScript({
  name: 'RENEW_CLAIMS',
  keys: ['claims', 'slots...'],
  args: ['runIds...', 'leaseMs'],
  reply: reply => textsReply('RENEW_CLAIMS', reply)
})

/**
 * A run's end and its webhook's delivery written down in one step, TRANSITION then, when it changed
 * the record, HOLD_DELIVERY (lua/end-and-hold.lua): the delivery's entry id, or undefined when the
 * record had changed (nothing written). Their KEYS and ARGV as their definitions build them.
 */
export const END_AND_HOLD = defineScript({
  name: 'END_AND_HOLD',
  keys: ['transitionKeys...', 'holdKeys...'],
  args: ['transitionArgs...', 'holdArgs...'],
  prelude: luaFunction('transition', TRANSITION) + luaFunction('hold', HOLD_DELIVERY),
  reply: reply => reply === null ? undefined : textReply('END_AND_HOLD', reply)
})

/**
 * A run's end and the take of the next run for the slot it leaves in one step, TRANSITION then,
 * when it changed the record, TAKE (lua/end-and-take.lua): what TAKE answered, or undefined when
 * the record had changed (nothing written, nothing taken). Their KEYS and ARGV as their
 * definitions build them; TAKE's Buffer replies kept.
 */
export const END_AND_TAKE = defineScript({
  name: 'END_AND_TAKE',
  keys: ['transitionKeys...', 'takeKeys...'],
  args: ['transitionArgs...', 'takeArgs...'],
  prelude: luaFunction('transition', TRANSITION) + luaFunction('take', TAKE),
  reply: reply => {
    const [ended, ...taken] = arrayReply('END_AND_TAKE', reply)
    if (ended === 0 && taken.length === 0) return undefined
    if (ended === 1 && taken.length === 1) return TAKE.parse(taken[0])
    throw unexpectedReply('END_AND_TAKE', reply)
  },
  buffers: true
})

/** Acknowledges and deletes a stream entry nobody will act on, in one command (lua/drop-entry.lua): whether it was there. */
export const DROP_ENTRY = defineScript({
  name: 'DROP_ENTRY',
  keys: ['stream'],
  args: ['group', 'entry'],
  reply: reply => codeReply('DROP_ENTRY', reply, [1, 0]) === 1
})

/** Every script above: loaded as a connection becomes ready. */
export const SCRIPTS: readonly LuaScript[] = [
  TRANSITION, MARK_FOLLOWED, END_AND_TAKE, DROP_ENTRY, KEEP_HELD, END_AND_HOLD,
  APPEND_EVENT, OPEN_RUN, KEEP_ANSWER, DROP_KEY, WEBHOOK_STATE, FORGET_CONSUMERS, RENEW_CLAIMS, FAIL_LOST_CLAIM,
  LOST_CLAIMS, LEASE_BEAT, LOOK_DUE, LEAVE_DELIVERY, CLAIM_KEY, FINISH_RECORDED, HOLD_DELIVERY, DELIVERY_DONE
].flatMap(script => script.scripts)
