import { BatchedScript } from './redis-script-batch.ts'
import { LuaScript } from './redis-lua-script.ts'
import { INDEX_RUN_LUA } from './redis-run-index.ts'
import { GROUP, STARTED_LUA, TAKE_LUA } from './redis-queue-scripts.ts'
import { LEASE_BEAT, LEAVE_DELIVERY, LOOK_DUE, LOST_CLAIMS, NOW_LUA } from './redis-due-scripts.ts'

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
export const TRANSITION_LUA = `${INDEX_RUN_LUA}${STARTED_LUA}
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

/**
 * A recorded sync call ends: its record, still running and its sidecar's (the one that claimed
 * its key: nobody else writes it; 0 when it is not), moves to its end, and its answer is kept in
 * its key's slot (when the slot is still its run's), in one step. The record as it was is not
 * sent to compare: the owner and the status say the same in a few bytes.
 * The claim leaves the app's claims set; the run moves to its status's index (redis-run-index.ts).
 * KEYS: claims, index, run, events, slot. ARGV: owner, new record, result, ttl seconds, live channel, run id,
 * status, content type, body, answer ttl ms, index cutoff ms.
 */
const FINISH_RECORDED_LUA = `${INDEX_RUN_LUA}
local current = redis.call('HMGET', KEYS[3], 'record', 'events', 'owner')
if current[3] ~= ARGV[1] or not current[1] or not string.find(current[1], '"status":"running"', 1, true) then return 0 end
redis.call('HSET', KEYS[3], 'record', ARGV[2], 'result', ARGV[3])
reindexRun(KEYS[2], ARGV[6], 'running', statusOf(ARGV[2]), ARGV[11])
redis.call('EXPIRE', KEYS[3], ARGV[4])
if current[2] then redis.call('EXPIRE', KEYS[4], ARGV[4]) end
redis.call('PUBLISH', ARGV[5], 'done')
if redis.call('HGET', KEYS[5], 'run') == ARGV[6] then
  redis.call('HSET', KEYS[5], 'status', ARGV[7], 'type', ARGV[8], 'body', ARGV[9])
  redis.call('PEXPIRE', KEYS[5], ARGV[10])
  redis.call('ZREM', KEYS[1], KEYS[5])
end
return 1
`
export const FINISH_RECORDED = new BatchedScript(FINISH_RECORDED_LUA, { shared: 2, own: 3, args: 11 })

/**
 * Appends event n to a run's events and tells its followers (`<n>\n<data>`), in order: 1
 * appended; 0 already there (a retry) or the run is gone; -1 an event before it is missing (not
 * appended, unless `skip`: the writer knows the ones before are lost). The oldest go past
 * RUN_MAX_EVENTS or RUN_MAX_EVENT_BYTES (the newest always stays): the run's hash counts the next
 * event number (`events`) and the kept events' bytes (`event_bytes`). An event appended after the
 * run ended (a cancel) expires with it.
 * Fencing: a run another sidecar took over (its owner is no longer the writer) takes no event (0).
 * KEYS: run, events. ARGV: entry id `0-<n+1>`, data, max events, live channel, n, max bytes, skip
 * ('1' or ''), the writer (its consumer name).
 */
export const APPEND_EVENT = new LuaScript(`
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if owner and owner ~= ARGV[8] then return 0 end
local n = tonumber(ARGV[5])
local expected = tonumber(redis.call('HGET', KEYS[1], 'events') or '0')
if n < expected then return 0 end
if n > expected and ARGV[7] ~= '1' then return -1 end
local kept = tonumber(redis.call('HGET', KEYS[1], 'event_bytes') or '0') + string.len(ARGV[2])
local count = redis.call('XLEN', KEYS[2]) + 1
local maxEvents, maxBytes = tonumber(ARGV[3]), tonumber(ARGV[6])
local from, last = '-', nil
while count > 1 and (count > maxEvents or kept > maxBytes) do
  local oldest = redis.call('XRANGE', KEYS[2], from, '+', 'COUNT', 1)[1]
  if not oldest then break end
  last = tonumber(string.sub(oldest[1], 3))
  kept = kept - string.len(oldest[2][2])
  count = count - 1
  from = '(' .. oldest[1]
end
if last then redis.call('XTRIM', KEYS[2], 'MINID', '0-' .. (last + 1)) end
redis.call('XADD', KEYS[2], ARGV[1], 'd', ARGV[2])
redis.call('HSET', KEYS[1], 'events', n + 1, 'event_bytes', kept)
local ttl = redis.call('TTL', KEYS[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
redis.call('PUBLISH', ARGV[4], ARGV[5] .. '\\n' .. ARGV[2])
return 1
`)

/**
 * Lua, prepended to a script: recordSyncRun(run key, index key, record, owner, webhook ('' none),
 * ttl seconds, run id, created_at ms) records a sync call running (a keyed call as it claims its key,
 * a call whose Prefer: wait ran out), owned by its sidecar and in the app's index; false when the id is taken.
 */
const RECORD_SYNC_RUN_LUA = `${INDEX_RUN_LUA}
local function recordSyncRun (runKey, index, record, owner, webhook, ttl, runId, createdAt)
  if redis.call('EXISTS', runKey) == 1 then return false end
  local fields = { 'record', record, 'async', '0', 'owner', owner }
  if webhook ~= '' then fields[#fields + 1] = 'webhook'; fields[#fields + 1] = webhook end
  redis.call('HSET', runKey, unpack(fields))
  redis.call('EXPIRE', runKey, ttl)
  indexRun(index, runId, 'running', createdAt)
  return true
end
`

/**
 * Claims an Idempotency-Key's slot unless a request holds it: nil when claimed, else what the slot
 * holds (run id, digest, async, then status, content type and body once answered), or {'lost', run
 * id} when it is a sync run's whose sidecar has not renewed it for `lost after` ms (FAIL_LOST_CLAIM
 * ends that run "replica lost" first: the retry gets that answer, never a second run).
 * With a record (a sync call), the run is recorded running in the same step, unless its id is taken
 * (-1: the key is not claimed then); a run recorded joins the app's index (redis-run-index.ts), and
 * the slot is held (no lease that could lapse and free a key whose request reached the app) until
 * its answer is kept, with its sidecar's last heartbeat in the app's claims set. Without (an async
 * submit, answered at once), the slot is a lease of `lease ms`.
 * KEYS: claims, slot, run, index. ARGV: run id, digest, async ('1' or '0'), lease ms, record ('' none), owner,
 * webhook ('' none), record ttl seconds, created_at ms, lost after ms.
 */
const CLAIM_KEY_LUA = `${RECORD_SYNC_RUN_LUA}${NOW_LUA}
if redis.call('EXISTS', KEYS[2]) == 1 then
  local held = redis.call('HMGET', KEYS[2], 'run', 'digest', 'async', 'status', 'type', 'body')
  local beat = redis.call('ZSCORE', KEYS[1], KEYS[2])
  if not held[4] and beat and tonumber(beat) < now - tonumber(ARGV[10]) then return { 'lost', held[1] } end
  return held
end
if ARGV[5] ~= '' and not recordSyncRun(KEYS[3], KEYS[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[1], ARGV[9]) then return -1 end
redis.call('HSET', KEYS[2], 'run', ARGV[1], 'digest', ARGV[2], 'async', ARGV[3])
if ARGV[5] == '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
else
  redis.call('EXPIRE', KEYS[2], ARGV[8])
  redis.call('ZADD', KEYS[1], now, KEYS[2])
end
return false
`
export const CLAIM_KEY = new BatchedScript(CLAIM_KEY_LUA, { shared: 1, own: 3, args: 10, buffers: true })

/**
 * A sync run's claim whose sidecar is lost (no heartbeat for `lost after` ms, by Redis's clock):
 * its run, if still running, ends with the record given ("replica lost", owned by the sidecar
 * that decided it: the lost one, should it come back, writes no more events and no end), and the
 * slot keeps that answer for its retries. 0 when the claim was renewed, answered or taken meanwhile.
 * KEYS: claims, slot, run, events, index. ARGV: run id, record, result, ttl seconds, live channel, status,
 * content type, body, answer ttl ms, lost after ms, owner, index cutoff ms.
 */
export const FAIL_LOST_CLAIM = new LuaScript(`${INDEX_RUN_LUA}${NOW_LUA}
local beat = redis.call('ZSCORE', KEYS[1], KEYS[2])
if not beat or tonumber(beat) >= now - tonumber(ARGV[10]) then return 0 end
redis.call('ZREM', KEYS[1], KEYS[2])
if redis.call('HGET', KEYS[2], 'run') ~= ARGV[1] or redis.call('HEXISTS', KEYS[2], 'status') == 1 then return 0 end
local current = redis.call('HMGET', KEYS[3], 'record', 'events')
if current[1] and string.find(current[1], '"status":"running"', 1, true) and ARGV[2] ~= '' then
  redis.call('HSET', KEYS[3], 'record', ARGV[2], 'result', ARGV[3], 'owner', ARGV[11])
  reindexRun(KEYS[5], ARGV[1], 'running', 'failed', ARGV[12])
  redis.call('EXPIRE', KEYS[3], ARGV[4])
  if current[2] then redis.call('EXPIRE', KEYS[4], ARGV[4]) end
  redis.call('PUBLISH', ARGV[5], 'done')
end
redis.call('HSET', KEYS[2], 'status', ARGV[6], 'type', ARGV[7], 'body', ARGV[8])
redis.call('PEXPIRE', KEYS[2], ARGV[9])
return 1
`)

/**
 * Records a sync call as a running run as it goes on (its `Prefer: wait` ran out), owned by its
 * sidecar, unless the id is taken (-1); like a keyed call's record, without a key; it joins the
 * app's index (redis-run-index.ts).
 * KEYS: run, index. ARGV: record, owner, webhook ('' none), ttl seconds, run id, created_at ms.
 */
export const OPEN_RUN = new LuaScript(`${RECORD_SYNC_RUN_LUA}
if not recordSyncRun(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]) then return -1 end
return 1
`)

/**
 * Keeps the answer in the slot the run holds (compare and set on the run id, with no answer kept
 * yet: a claim taken for lost keeps its "replica lost"), for the ttl again; it leaves the claims set.
 * KEYS: slot, claims. ARGV: run id, status, content type, body, ttl ms.
 */
export const KEEP_ANSWER = new LuaScript(`
if redis.call('HGET', KEYS[1], 'run') ~= ARGV[1] or redis.call('HEXISTS', KEYS[1], 'status') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'type', ARGV[3], 'body', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
`)

/**
 * Frees the slot the run holds, unless it has an answer; with forget ('1'), the run recorded with
 * the claim goes too (it never reached the app). The claim leaves the app's claims set.
 * KEYS: slot, run, claims. ARGV: run id, forget.
 */
export const DROP_KEY = new LuaScript(`
if redis.call('HGET', KEYS[1], 'run') ~= ARGV[1] or redis.call('HEXISTS', KEYS[1], 'status') == 1 then return 0 end
redis.call('ZREM', KEYS[3], KEYS[1])
if ARGV[2] == '1' and redis.call('HGET', KEYS[2], 'async') == '0' then redis.call('DEL', KEYS[2]) end
return redis.call('DEL', KEYS[1])
`)

/**
 * The run's webhook delivery state (status, attempts), in a field of its own (`webhook_state`,
 * `<status> <attempts>`: read into the record by RedisContext.readOrMissing): the record itself is
 * not rewritten, nor its compare-and-set disturbed. The secret goes once it ended. 0 when the run
 * is gone. KEYS: run. ARGV: status, attempts.
 */
export const WEBHOOK_STATE = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'webhook_state', ARGV[1] .. ' ' .. ARGV[2])
if ARGV[1] ~= 'pending' then redis.call('HDEL', KEYS[1], 'webhook') end
return 1
`)

/** The consumer group every sidecar holds an app's webhook deliveries in. */
export const SENDERS = 'senders'

/**
 * Writes a webhook delivery down and puts it straight into this sidecar's pending list (XCLAIM
 * FORCE: nobody reads the stream, sidecars only take over idle entries), its first attempt
 * counted (it begins at once). Returns the entry id.
 * KEYS: deliveries stream, delivery hash. ARGV: run id, url, body, secret ('' none), consumer,
 * ttl seconds, delivery id, traceparent ('' none), tracestate.
 */
const HOLD_DELIVERY_LUA = `
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('XGROUP', 'CREATE', KEYS[1], '${SENDERS}', '0', 'MKSTREAM') end
local id = redis.call('XADD', KEYS[1], '*', 'delivery', ARGV[7])
if not pcall(redis.call, 'XCLAIM', KEYS[1], '${SENDERS}', ARGV[5], 0, id, 'FORCE', 'JUSTID') then
  -- the stream without its group (deleted by hand): made again
  redis.call('XGROUP', 'CREATE', KEYS[1], '${SENDERS}', '0')
  redis.call('XCLAIM', KEYS[1], '${SENDERS}', ARGV[5], 0, id, 'FORCE', 'JUSTID')
end
local fields = { 'run', ARGV[1], 'url', ARGV[2], 'body', ARGV[3], 'attempts', 1, 'entry', id }
if ARGV[4] ~= '' then fields[#fields + 1] = 'secret'; fields[#fields + 1] = ARGV[4] end
if ARGV[8] ~= '' then
  fields[#fields + 1] = 'traceparent'; fields[#fields + 1] = ARGV[8]
  fields[#fields + 1] = 'tracestate'; fields[#fields + 1] = ARGV[9]
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('EXPIRE', KEYS[2], ARGV[6])
return id
`
export const HOLD_DELIVERY = new BatchedScript(HOLD_DELIVERY_LUA, { shared: 1, own: 1, args: 9 })

/** A delivery ended: its entry acknowledged and deleted, its hash (and secret) gone. KEYS: deliveries stream, delivery hash. ARGV: entry id. */
const DELIVERY_DONE_LUA = `
redis.call('XACK', KEYS[1], '${SENDERS}', ARGV[1])
redis.call('XDEL', KEYS[1], ARGV[1])
return redis.call('DEL', KEYS[2])
`
export const DELIVERY_DONE = new BatchedScript(DELIVERY_DONE_LUA, { shared: 1, own: 1, args: 1 })

/**
 * Removes consumers that hold no entry from a stream's group, in one step (a consumer deleted with
 * entries would lose them): the one named (a sidecar leaving), or, with no name, every one idle
 * longer than the ms given (sidecars long gone). Returns how many went.
 * KEYS: stream. ARGV: group, consumer ('' any), idle ms.
 */
export const FORGET_CONSUMERS = new LuaScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
local removed = 0
for _, consumer in ipairs(consumers) do
  local field = {}
  for i = 1, #consumer, 2 do field[consumer[i]] = consumer[i + 1] end
  if field.pending == 0 and (field.name == ARGV[2] or (ARGV[2] == '' and field.idle > tonumber(ARGV[3]))) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], field.name)
    removed = removed + 1
  end
end
return removed
`)

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

/**
 * The heartbeat renews this sidecar's Idempotency-Key claims still running (`run` still its run's,
 * no answer kept yet): a sync run's time in the app's claims set (Redis's clock), an async
 * submit's lease; a claim taken by another, or for lost, meanwhile is left alone. Returns the slot
 * keys no longer this sidecar's. KEYS: claims, then the slots. ARGV: their run ids, then the lease in ms.
 */
export const RENEW_CLAIMS = new LuaScript(`${NOW_LUA}
local lost = {}
local lease = ARGV[#ARGV]
for i = 2, #KEYS do
  local key = KEYS[i]
  if redis.call('HGET', key, 'run') == ARGV[i - 1] and redis.call('HEXISTS', key, 'status') == 0 then
    if redis.call('ZADD', KEYS[1], 'XX', 'CH', now, key) == 0 and not redis.call('ZSCORE', KEYS[1], key) then redis.call('PEXPIRE', key, lease) end
  else
    lost[#lost + 1] = key
  end
end
return lost
`)

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
local function take (KEYS, ARGV)${TAKE_LUA}end
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
  TRANSITION, MARK_FOLLOWED, END_AND_TAKE, APPEND_EVENT, OPEN_RUN, DROP_ENTRY, KEEP_ANSWER, DROP_KEY, WEBHOOK_STATE, FORGET_CONSUMERS, KEEP_HELD, RENEW_CLAIMS, END_AND_HOLD,
  FAIL_LOST_CLAIM, LOST_CLAIMS, LEASE_BEAT, LOOK_DUE, LEAVE_DELIVERY,
  ...CLAIM_KEY.scripts, ...FINISH_RECORDED.scripts, ...HOLD_DELIVERY.scripts, ...DELIVERY_DONE.scripts
]
