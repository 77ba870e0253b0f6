-- WEBHOOK_STATE: the run's webhook delivery state (status, attempts), in a field of its own.
-- KEYS: run
-- ARGV: status, attempts
-- Returns: 1 written; 0 the run is gone
--
-- `webhook_state`, `<status> <attempts>`: read into the record by RedisContext.readOrMissing; the
-- record itself is not rewritten, nor its compare-and-set disturbed. The secret goes once it ended
-- (any status but pending).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'webhook_state', ARGV[1] .. ' ' .. ARGV[2])
if ARGV[1] ~= 'pending' then redis.call('HDEL', KEYS[1], 'webhook') end
return 1
