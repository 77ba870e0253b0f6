-- TURNS_BY_URGENCY: the app's runs in the turn order (queued, not taken), by urgency.
-- KEYS: turns
-- ARGV: none
-- Returns: {how many of urgency 0, 1, …, 7}
--#include turn.lua
local counts = {}
for urgency = 0, 7 do counts[urgency + 1] = redis.call('ZCOUNT', KEYS[1], urgency * TURN_SPAN, '(' .. ((urgency + 1) * TURN_SPAN)) end
return counts
