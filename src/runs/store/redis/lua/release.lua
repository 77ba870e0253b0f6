-- RELEASE: gives a taken run back to the queue (a stop, a slot a call took meanwhile).
-- KEYS: run, queue, turns, fair, wake, queued bytes, due set, index
-- ARGV: entry, run id, record as started, record as queued
-- Returns: 1 queued again; 0 the run is no longer queued (canceled, ended, gone): its entry alone goes
--
-- record as started: '' the run was taken unstarted (the reaper's); record as queued: its record
-- before TAKE started it.
-- Its entry is acknowledged and deleted and, for a run still queued, a new one added, and the run
-- takes back the turn it had (one queued by a sidecar of a version before turns gets one:
-- turn.lua), with a wake-up. A run TAKE started (its record still as TAKE wrote it) goes back to
-- queued first: its owner, index, due set time and queued bytes as before the take (started.lua's
-- moveIndex, at its created_at).
--#include turn.lua
--#include started.lua
redis.call('XACK', KEYS[2], 'runners', ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
local fields = redis.call('HMGET', KEYS[1], 'record', 'turn', 'turn_at', 'urgency', 'caller', 'at', 'expires')
if ARGV[3] ~= '' and fields[1] == ARGV[3] then
  local bytes = redis.call('HSTRLEN', KEYS[1], 'body')
  redis.call('HSET', KEYS[1], 'record', ARGV[4], 'queued_bytes', bytes)
  moveIndex(KEYS[8], ARGV[2], 'running', 'queued', fields[6] or redis.call('ZSCORE', KEYS[8] .. ':running', ARGV[2]) or 0)
  if fields[7] then redis.call('ZADD', KEYS[7], fields[7], ARGV[2]) end
  if bytes > 0 then redis.call('INCRBY', KEYS[6], bytes) end
  fields[1] = ARGV[4]
end
if not fields[1] or not string.find(fields[1], '"status":"queued"', 1, true) then return 0 end
local id = redis.call('XADD', KEYS[2], '*', 'run', ARGV[2], 'turn', '1')
if fields[2] then
  redis.call('ZADD', KEYS[3], fields[3], fields[2])
else
  local turn, at = queueTurn(KEYS[3], KEYS[4], tonumber(fields[4] or '3'), fields[5] or '', id, ARGV[2])
  redis.call('HSET', KEYS[1], 'turn', turn, 'turn_at', at)
end
redis.call('HSET', KEYS[1], 'entry', id)
redis.call('HDEL', KEYS[1], 'owner')
redis.call('RPUSH', KEYS[5], tonumber(fields[4] or '3'))
return 1
