-- RENEW_CLAIMS: the heartbeat renews this sidecar's Idempotency-Key claims still running.
-- KEYS: claims, slots...
-- ARGV: run ids..., lease ms
-- Returns: the slot keys no longer this sidecar's
--
-- A claim still running: `run` still its run's, no answer kept yet. A sync run's time in the app's
-- claims set is renewed (Redis's clock), an async submit's lease (not in the set) made `lease ms`
-- again; a claim taken by another, or for lost, meanwhile is left alone. One run id per slot.
--#include now.lua
local lost = {}
local lease = ARGV[#ARGV]
for i = 2, #KEYS do
  local key = KEYS[i]
  if redis.call('HGET', key, 'run') == ARGV[i - 1] and redis.call('HEXISTS', key, 'status') == 0 then
    if redis.call('ZADD', KEYS[1], 'XX', 'CH', now, key) == 0 and not redis.call('ZSCORE', KEYS[1], key) then redis.call('PEXPIRE', key, lease) end
  else
    lost[#lost + 1] = key
  end
end
return lost
