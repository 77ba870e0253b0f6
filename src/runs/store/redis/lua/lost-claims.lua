-- LOST_CLAIMS: the app's sync runs' claims whose sidecar is lost, at most 16.
-- KEYS: claims
-- ARGV: lost after ms
-- Returns: {slot, run id}... of the claims with no heartbeat for `lost after` ms, by Redis's clock
--
-- A claim whose slot is gone (expired) leaves the set.
--#include now.lua
local out = {}
for _, slot in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[1])), 'LIMIT', 0, 16)) do
  local runId = redis.call('HGET', slot, 'run')
  if runId then
    out[#out + 1] = slot
    out[#out + 1] = runId
  else
    redis.call('ZREM', KEYS[1], slot)
  end
end
return out
