-- KEEP_ANSWER: keeps the answer in the slot the run holds (compare and set on the run id).
-- KEYS: slot, claims
-- ARGV: run id, status, content type, body, ttl ms
-- Returns: 1 kept; 0 the slot is another run's, or answered already
--
-- Only with no answer kept yet: a claim taken for lost keeps its "replica lost". The slot is kept
-- for the ttl again; it leaves the claims set.
if redis.call('HGET', KEYS[1], 'run') ~= ARGV[1] or redis.call('HEXISTS', KEYS[1], 'status') == 1 then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'type', ARGV[3], 'body', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
