-- LOOK_DUE: what is due in the app's due set by Redis's clock.
-- KEYS: due set
-- ARGV: count
-- Returns: {now, the member after them ('' none), its score ('' none), members due...} (at most `count` due)
--#include now.lua
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local after = redis.call('ZRANGE', KEYS[1], #due, #due, 'WITHSCORES')
local out = { now, after[1] or '', after[2] or '' }
for _, member in ipairs(due) do out[#out + 1] = member end
return out
