-- TRANSITION: moves a run from the record it had to a new one (compare and set), with what goes with it.
-- KEYS: run, queue, events, queued bytes, old running set, expiry, turns, index
-- ARGV: old record, new record, result, owner, entry, ttl seconds, live channel, message, run id, index cutoff ms
-- Returns: 1 moved; 0 the record was not `old record` (another sidecar changed it first): nothing written
--
-- result, owner, entry, message: '' none; ttl seconds: 0 none (a run not finished); index cutoff
-- ms: '' none. expiry: the app's due set.
-- What goes with it: its result, its owner, its queue entry acknowledged and deleted (group
-- `runners`), its retention TTL on the run and on its events (when it has any: the run's `events`
-- field), and `message` to its followers on the live channel (when it has any: MARK_FOLLOWED), in
-- one HMGET, one HSET and one HDEL on the run. Every move ends the run (a start is START_READ's or
-- TAKE's): one canceled while queued gives its body's bytes back to the app's queued bytes; a
-- finished one drops its request and its webhook (the secret: its owner has it for the delivery,
-- and nobody else will need it), and, if it was running and started by the version before (no
-- `at`), leaves that version's running set (`old running set`: this version counts runs taken as
-- the queue's entries less its turns, RUNNING).
-- A run that was queued leaves the app's due set and its turn order (turn.lua); it moves to its
-- new status's index at its created_at (`at`, started.lua's moveIndex; read from the index for a
-- run recorded without: run-index.lua), which about one end in 32 trims of runs created before the
-- cutoff. END_AND_HOLD, END_AND_TAKE and CANCEL_QUEUED run this as a function, transition(KEYS, ARGV).
--#include run-index.lua
--#include started.lua
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
  -- the trim of runs expired long ago, now and then (about one end in 32)
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
  redis.call('XACK', KEYS[2], 'runners', ARGV[5])
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
