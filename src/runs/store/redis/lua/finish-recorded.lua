-- FINISH_RECORDED: a recorded sync call ends, and its answer is kept in its key's slot, in one step.
-- KEYS: claims, index, run, events, slot
-- ARGV: owner, new record, result, ttl seconds, live channel, run id, status, content type, body, answer ttl ms, index cutoff ms
-- Returns: 1 ended; 0 the run is not running, or not this owner's
--
-- Its record, still running and its sidecar's (the one that claimed its key: nobody else writes
-- it), moves to its end; its answer is kept in the slot when the slot is still its run's. The
-- record as it was is not sent to compare: the owner and the status say the same in a few bytes.
-- The claim leaves the app's claims set; the run moves to its status's index (run-index.lua).
--#include run-index.lua
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
