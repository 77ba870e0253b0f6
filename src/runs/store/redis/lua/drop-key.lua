-- DROP_KEY: frees the slot the run holds, unless it has an answer.
-- KEYS: slot, run, claims
-- ARGV: run id, forget
-- Returns: 1 freed; 0 the slot is another run's, answered, or gone
--
-- forget: '1', the run recorded with the claim goes too (a sync run's: it never reached the app).
-- The claim leaves the app's claims set.
if redis.call('HGET', KEYS[1], 'run') ~= ARGV[1] or redis.call('HEXISTS', KEYS[1], 'status') == 1 then return 0 end
redis.call('ZREM', KEYS[3], KEYS[1])
if ARGV[2] == '1' and redis.call('HGET', KEYS[2], 'async') == '0' then redis.call('DEL', KEYS[2]) end
return redis.call('DEL', KEYS[1])
