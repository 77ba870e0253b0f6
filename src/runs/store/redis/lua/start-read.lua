-- START_READ: a run taken over from a lost sidecar starts, its request read in the same step.
-- KEYS: run, queued bytes, due set, index
-- ARGV: old record, new record, owner, run id
-- Returns: {1, request, body, webhook (false none)} started; {0} the record had changed (a cancel, a takeover)
--
-- The reaper's, or a take whose answer was lost (a run TAKE hands out is started by TAKE):
-- compare-and-set of its record (queued → running, owned by the taker), its request, body and
-- webhook read in the same HMGET. It leaves the queue's bytes (its `queued_bytes` becomes 0, in
-- the record's HSET) and the due set; its request and body stay until it ends (TRANSITION drops
-- them then), so that a start tried again after its reply was lost finds them. It moves from the
-- app's queued index to its running one (run-index.lua).
--#include run-index.lua
local fields = redis.call('HMGET', KEYS[1], 'record', 'request', 'body', 'webhook', 'queued_bytes')
if fields[1] ~= ARGV[1] then return {0} end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'owner', ARGV[3], 'queued_bytes', 0)
reindexRun(KEYS[4], ARGV[4], 'queued', 'running')
redis.call('ZREM', KEYS[3], ARGV[4])
local queued = tonumber(fields[5] or '0')
if queued > 0 and redis.call('DECRBY', KEYS[2], queued) < 0 then redis.call('SET', KEYS[2], 0) end
return {1, fields[2], fields[3], fields[4]}
