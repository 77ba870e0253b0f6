-- FORGET_CONSUMERS: removes consumers that hold no entry from a stream's group, in one step.
-- KEYS: stream
-- ARGV: group, consumer, idle ms
-- Returns: how many went
--
-- A consumer deleted with entries would lose them. The one named (a sidecar leaving), or, with no
-- name (consumer ''), every one idle longer than `idle ms` (sidecars long gone).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return 0 end
local removed = 0
for _, consumer in ipairs(consumers) do
  local field = {}
  for i = 1, #consumer, 2 do field[consumer[i]] = consumer[i + 1] end
  if field.pending == 0 and (field.name == ARGV[2] or (ARGV[2] == '' and field.idle > tonumber(ARGV[3]))) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], field.name)
    removed = removed + 1
  end
end
return removed
