-- FAIL_LOST_CLAIM: ends a lost sidecar's sync run "replica lost", and keeps that answer in its slot.
-- KEYS: claims, slot, run, events, index
-- ARGV: run id, record, result, ttl seconds, live channel, status, content type, body, answer ttl ms, lost after ms, owner, index cutoff ms
-- Returns: 1 ended; 0 the claim was renewed, answered or taken meanwhile
--
-- A sync run's claim whose sidecar is lost (no heartbeat for `lost after` ms, by Redis's clock):
-- its run, if still running, ends with the record given ('' none: the slot's answer alone),
-- owned by the sidecar that decided it (the lost one, should it come back, writes no more events
-- and no end), and moves to the failed index (run-index.lua); the slot keeps that answer for its
-- retries.
--#include run-index.lua
--#include now.lua
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
