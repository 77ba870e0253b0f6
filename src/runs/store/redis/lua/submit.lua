-- SUBMIT: records a queued run and queues it, in one step.
-- KEYS: run, queue, queued bytes, due set, index, turns, fair, wake
-- ARGV: record, request, body, webhook, depth, run id, max bytes, expiry, created at ms, urgency, caller, sub
-- Returns: 1 queued; -1 the run id is taken; -2 `depth` runs wait already (ASYNC_QUEUE_DEPTH); -3 its body would pass `max bytes` (ASYNC_QUEUE_MAX_BYTES)
--
-- webhook: '' none; expiry: epoch ms, '' none sooner than the queue's TTL; urgency: '' none.
-- Waiting runs are the turns in the order (a run leaves it as it is taken, and starts). The body's
-- bytes are counted in the app's queued bytes until the run leaves the queue (TAKE, START_READ, or
-- TRANSITION for a cancel); with no turn left in the queue, nothing is counted (the count starts
-- again from this body).
-- The stream entry names the run and says it has a turn: it is what a taker holds (its pending
-- list, the reaper, fencing).
-- The run takes its turn (turn.lua: by urgency, fair across callers) and a wake-up goes in the
-- app's wake list, its urgency (a taker blocked on it takes the next run, and knows how urgent the
-- queue's first run is at least, as it competes with waiting calls). It joins the app's queued
-- index (run-index.lua), which is also where ASYNC_QUEUE_TTL_SECONDS finds it (redis-due.ts: the
-- index's oldest); a sooner `Cancel-After` (`expiry` given) puts it in the app's due set too,
-- which it leaves as it starts or ends, and its hash keeps that time (`expires`: a run given back
-- finds it). Its created_at (`at`, ms) goes in its hash: a move between indexes reads its score there.
-- Its `Priority` urgency and caller, when given, go in the record's hash (TAKE hands them to the
-- taker's gate and CALLER_MAX_INFLIGHT); without, its turn is urgency 3's, caller ''. Its `sub` (the
-- token's that submitted it) goes there too, for RUN_ACCESS: never in the record, whose shape is the API's.
-- The first write is the bytes' count (a Redis out of memory refuses the whole script there).
--#include run-index.lua
--#include turn.lua
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local waiting = redis.call('ZCARD', KEYS[6])
if waiting >= tonumber(ARGV[5]) then return -2 end
local bytes = string.len(ARGV[3])
if bytes > tonumber(ARGV[7]) then return -3 end
if waiting == 0 then
  redis.call('SET', KEYS[3], bytes)
elseif bytes > 0 and redis.call('INCRBY', KEYS[3], bytes) > tonumber(ARGV[7]) then
  redis.call('DECRBY', KEYS[3], bytes)
  return -3
end
local id = redis.call('XADD', KEYS[2], '*', 'run', ARGV[6], 'turn', '1')
local turn, at = queueTurn(KEYS[6], KEYS[7], tonumber(ARGV[10]) or 3, ARGV[11], id, ARGV[6])
local fields = { 'record', ARGV[1], 'request', ARGV[2], 'body', ARGV[3], 'async', '1', 'entry', id, 'queued_bytes', bytes, 'turn', turn, 'turn_at', at, 'at', ARGV[9], 'sub', ARGV[12] }
if ARGV[8] ~= '' then fields[#fields + 1] = 'expires'; fields[#fields + 1] = ARGV[8] end
if ARGV[4] ~= '' then fields[#fields + 1] = 'webhook'; fields[#fields + 1] = ARGV[4] end
if ARGV[10] ~= '' then fields[#fields + 1] = 'urgency'; fields[#fields + 1] = ARGV[10]; fields[#fields + 1] = 'caller'; fields[#fields + 1] = ARGV[11] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('RPUSH', KEYS[8], tonumber(ARGV[10]) or 3)
if ARGV[8] ~= '' then redis.call('ZADD', KEYS[4], ARGV[8], ARGV[6]) end
indexRun(KEYS[5], ARGV[6], 'queued', ARGV[9])
return 1
