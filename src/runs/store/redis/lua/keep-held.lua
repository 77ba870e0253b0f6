-- KEEP_HELD: the heartbeat renews this sidecar's hold on the entries it still holds, and only those.
-- KEYS: stream
-- ARGV: group, consumer, ids...
-- Returns: the ids no longer held (the caller drops them)
--
-- XCLAIM … JUSTID: the entry's idle time back to 0. An entry another sidecar took over while this
-- one was silent (a long pause) stays the other's.
local lost = {}
for i = 3, #ARGV do
  local mine = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if #mine == 1 then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
