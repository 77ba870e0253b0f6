-- LOOK_DUE: what is due by Redis's clock: in the app's due set, and the queued runs submitted
-- longer than the queue's TTL ago (the app's queued index, by created_at: a run's
-- ASYNC_QUEUE_TTL_SECONDS is not in the due set, only a sooner Cancel-After is).
-- KEYS: due set, queued index
-- ARGV: count, queue ttl ms
-- Returns: {now, the due set's member after those due ('' none), its score ('' none), when the queued index's next run reaches the TTL ('' none), members due..., then queued runs past the TTL...} (at most `count` of each)
--#include now.lua
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local after = redis.call('ZRANGE', KEYS[1], #due, #due, 'WITHSCORES')
local ttl = tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl, 'LIMIT', 0, tonumber(ARGV[1]))
local oldest = redis.call('ZRANGE', KEYS[2], #old, #old, 'WITHSCORES')
local out = { now, after[1] or '', after[2] or '', oldest[2] and tostring(tonumber(oldest[2]) + ttl) or '' }
for _, member in ipairs(due) do out[#out + 1] = member end
for _, runId in ipairs(old) do out[#out + 1] = runId end
return out
