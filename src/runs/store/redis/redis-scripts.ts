import type { KeyEntry } from '../../run-data.ts'
import { LuaScript } from './redis-lua-script.ts'
import { arrayReply, codeReply, defineScript, integerReply, textReply, textsReply, unexpectedReply } from './redis-named-script.ts'
import { INDEX_RUN_LUA } from './redis-run-index.ts'
import { GROUP, TAKE } from './redis-queue-scripts.ts'
import { luaSource } from './redis-lua-file.ts'
import { LEASE_BEAT, LEAVE_DELIVERY, LOOK_DUE, LOST_CLAIMS } from './redis-due-scripts.ts'

// The run store's scripts, each in lua/<kebab-name>.lua with its KEYS, ARGV and replies in its
// header; TRANSITION, MARK_FOLLOWED, END_AND_TAKE, END_AND_HOLD, KEEP_HELD and DROP_ENTRY are still written here.

/**
 * Moves a run from the record it had (compare and set: 0 when another sidecar changed it first) to
 * a new one, with what goes with it: its result, its owner, its queue entry acknowledged and
 * deleted, its retention TTL on the run and on its events (when it has any: the run's `events`
 * field), and a message to its followers (when it has any: MARK_FOLLOWED), in one HMGET, one HSET
 * and one HDEL on the run. Every
 * move ends the run (a start is START_READ's): one canceled while queued gives its body's bytes
 * back to the app's queued-bytes; a finished one drops its request and its webhook (the secret:
 * its owner has it for the delivery, and nobody else will need it), and, if it was running and
 * started by the version before (no `at`), leaves that version's running set (`running`: this
 * version counts runs taken as the queue's entries less its turns).
 * A run that was queued leaves the app's expiry set and its turn order (redis-queue-scripts.ts); it
 * moves to its new status's index at its created_at (`at`; read from the index for a run recorded
 * without), which about one end in 32 trims of runs created before the cutoff (redis-run-index.ts).
 * KEYS: run, queue, events, queued bytes, running, expiry, turns, index. ARGV: old record, new record, result (''),
 * owner (''), entry (''), ttl seconds (0), live channel, message (''), run id, index cutoff ms ('' none).
 */
export const TRANSITION_LUA = `${INDEX_RUN_LUA}${luaSource('started.lua')}
local current = redis.call('HMGET', KEYS[1], 'record', 'queued_bytes', 'events', 'turn', 'at', 'followed')
if current[1] ~= ARGV[1] then return 0 end
local set = { 'record', ARGV[2] }
if ARGV[3] ~= '' then set[#set + 1] = 'result'; set[#set + 1] = ARGV[3] end
if ARGV[4] ~= '' then set[#set + 1] = 'owner'; set[#set + 1] = ARGV[4] end
-- the first write may grow memory: a Redis out of memory refuses the whole script there, not halfway
redis.call('HSET', KEYS[1], unpack(set))
local from, to = statusOf(ARGV[1]), statusOf(ARGV[2])
if not current[5] then reindexRun(KEYS[8], ARGV[9], from, to, ARGV[10])
elseif from and to and from ~= to then
  moveIndex(KEYS[8], ARGV[9], from, to, current[5])
  -- the trim of runs expired long ago, now and then (about one end in TRIM_EVERY)
  if ARGV[10] ~= '' and tonumber(current[5]) % 32 == 0 then redis.call('ZREMRANGEBYSCORE', KEYS[8] .. ':' .. to, '-inf', '(' .. ARGV[10]) end
end
-- the running set is the version before's (a run it started has no 'at'): this version keeps none
if string.find(ARGV[1], '"status":"running"', 1, true) then
  if not current[5] then redis.call('SREM', KEYS[5], KEYS[1]) end
elseif string.find(ARGV[1], '"status":"queued"', 1, true) then
  redis.call('ZREM', KEYS[6], ARGV[9])
  if current[4] then redis.call('ZREM', KEYS[7], current[4]) end
end
if ARGV[5] ~= '' then
  redis.call('XACK', KEYS[2], '${GROUP}', ARGV[5])
  redis.call('XDEL', KEYS[2], ARGV[5])
end
local gone = nil
local queued = tonumber(current[2] or '0')
if queued > 0 then
  if redis.call('DECRBY', KEYS[4], queued) < 0 then redis.call('SET', KEYS[4], 0) end
  gone = { 'queued_bytes', 'request', 'body', 'turn', 'turn_at' }
end
local ttl = tonumber(ARGV[6])
if ttl > 0 then
  gone = { 'queued_bytes', 'request', 'body', 'webhook', 'turn', 'turn_at', 'expires', 'at' }
  redis.call('EXPIRE', KEYS[1], ttl)
  if current[3] then redis.call('EXPIRE', KEYS[3], ttl) end
end
if gone then redis.call('HDEL', KEYS[1], unpack(gone)) end
if ARGV[8] ~= '' and current[6] then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
return 1
`
export const TRANSITION = new LuaScript(TRANSITION_LUA)

/**
 * A follower of the run is listening on its live channel: its ends are told there from now on
 * (TRANSITION publishes `done` only for a run followed). Sent after the follower subscribed and
 * before it reads the run: an end written before this is read, one after it is heard. A run gone
 * (expired) is not recreated. KEYS: run.
 */
export const MARK_FOLLOWED = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'followed', '1')
return 1
`)

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
  args: ['runId', 'digest', 'async', 'leaseMs', 'record', 'owner', 'webhook', 'recordTtlSeconds', 'createdAtMs', 'lostAfterMs'],
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

/** Records a sync call running as it goes on (lua/open-run.lua): false when its run id is taken. */
export const OPEN_RUN = defineScript({
  name: 'OPEN_RUN',
  keys: ['run', 'index'],
  args: ['record', 'owner', 'webhook', 'ttlSeconds', 'runId', 'createdAtMs'],
  reply: reply => codeReply('OPEN_RUN', reply, [1, -1]) === 1
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
/** HOLD_DELIVERY's Lua, which END_AND_HOLD runs after a run's end. */
export const HOLD_DELIVERY_LUA = HOLD_DELIVERY.source

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

/**
 * The heartbeat: renews this sidecar's hold on the entries it still holds (XCLAIM … JUSTID, idle
 * time back to 0), and only those: an entry another sidecar took over while this one was silent
 * (a long pause) stays the other's. Returns the ids no longer held (dropped by the caller).
 * KEYS: stream. ARGV: group, consumer, ids….
 */
export const KEEP_HELD = new LuaScript(`
local lost = {}
for i = 3, #ARGV do
  local mine = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #mine == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
`)

/** Renews this sidecar's Idempotency-Key claims still running (lua/renew-claims.lua): the slots no longer its. */
export const RENEW_CLAIMS = defineScript({
  name: 'RENEW_CLAIMS',
  keys: ['claims', 'slots...'],
  args: ['runIds...', 'leaseMs'],
  reply: reply => textsReply('RENEW_CLAIMS', reply)
})

/**
 * A run's end and its webhook's delivery written down in one step (TRANSITION, then, when it
 * changed the record, HOLD_DELIVERY): a sidecar that dies right after the end leaves the delivery
 * to another, never a finished run with no delivery. Returns HOLD_DELIVERY's entry id, or false
 * when the record had changed (nothing written).
 * KEYS: TRANSITION's eight, then HOLD_DELIVERY's two. ARGV: TRANSITION's ten, then HOLD_DELIVERY's nine.
 */
export const END_AND_HOLD = new LuaScript(`
local function transition (KEYS, ARGV)${TRANSITION_LUA}end
local function hold (KEYS, ARGV)${HOLD_DELIVERY_LUA}end
if transition({ unpack(KEYS, 1, 8) }, { unpack(ARGV, 1, 10) }) ~= 1 then return false end
return hold({ KEYS[9], KEYS[10] }, { unpack(ARGV, 11, 19) })
`)

/**
 * A run's end and the take of the next run for the slot it leaves, in one step (TRANSITION, then,
 * when it changed the record, TAKE): no round trip between a run's end and the next run's start.
 * Returns {1, TAKE's reply…} or {0} when the record had changed (nothing written, nothing taken).
 * KEYS: TRANSITION's eight, then TAKE's seven. ARGV: TRANSITION's ten, then TAKE's seven.
 */
export const END_AND_TAKE = new LuaScript(`
local function transition (KEYS, ARGV)${TRANSITION_LUA}end
local function take (KEYS, ARGV)${TAKE.source}end
if transition({ unpack(KEYS, 1, 8) }, { unpack(ARGV, 1, 10) }) ~= 1 then return { 0 } end
return { 1, take({ unpack(KEYS, 9, 15) }, { unpack(ARGV, 11, 17) }) }
`)

/**
 * Acknowledges and deletes a stream entry nobody will act on, in one command (not a MULTI: on a
 * cluster, ioredis can leave a transaction's queued commands rejected and unhandled when the
 * connection closes, redis/ioredis#883). KEYS: stream. ARGV: group, entry.
 */
export const DROP_ENTRY = new LuaScript(`
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
`)

/** Every script above: loaded as a connection becomes ready. */
export const SCRIPTS: readonly LuaScript[] = [
  TRANSITION, MARK_FOLLOWED, END_AND_TAKE, DROP_ENTRY, KEEP_HELD, END_AND_HOLD,
  ...[APPEND_EVENT, OPEN_RUN, KEEP_ANSWER, DROP_KEY, WEBHOOK_STATE, FORGET_CONSUMERS, RENEW_CLAIMS, FAIL_LOST_CLAIM].flatMap(script => script.scripts),
  ...[LOST_CLAIMS, LEASE_BEAT, LOOK_DUE, LEAVE_DELIVERY].flatMap(script => script.scripts),
  ...CLAIM_KEY.scripts, ...FINISH_RECORDED.scripts, ...HOLD_DELIVERY.scripts, ...DELIVERY_DONE.scripts
]
