-- APPEND_EVENT: appends event n to a run's events and tells its followers (`<n>\n<data>`), in order.
-- KEYS: run, events
-- ARGV: entry id, data, max events, live channel, n, max bytes, skip, writer
-- Returns: 1 appended; 0 already there (a retry), the run is gone, or another owner's; -1 an event before it is missing
--
-- entry id: `0-<n+1>`; skip: '1' or '' (with '1', appended after a gap: the writer knows the ones
-- before are lost); writer: the writing sidecar's consumer name.
-- The oldest go past RUN_MAX_EVENTS or RUN_MAX_EVENT_BYTES (the newest always stays): the run's
-- hash counts the next event number (`events`) and the kept events' bytes (`event_bytes`). An
-- event appended after the run ended (a cancel) expires with it.
-- Fencing: a run another sidecar took over (its owner is no longer the writer) takes no event (0).
local owner = redis.call('HGET', KEYS[1], 'owner')
if not owner and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if owner and owner ~= ARGV[8] then return 0 end
local n = tonumber(ARGV[5])
local expected = tonumber(redis.call('HGET', KEYS[1], 'events') or '0')
if n < expected then return 0 end
if n > expected and ARGV[7] ~= '1' then return -1 end
local kept = tonumber(redis.call('HGET', KEYS[1], 'event_bytes') or '0') + string.len(ARGV[2])
local count = redis.call('XLEN', KEYS[2]) + 1
local maxEvents, maxBytes = tonumber(ARGV[3]), tonumber(ARGV[6])
local from, last = '-', nil
while count > 1 and (count > maxEvents or kept > maxBytes) do
  local oldest = redis.call('XRANGE', KEYS[2], from, '+', 'COUNT', 1)[1]
  if not oldest then break end
  last = tonumber(string.sub(oldest[1], 3))
  kept = kept - string.len(oldest[2][2])
  count = count - 1
  from = '(' .. oldest[1]
end
if last then redis.call('XTRIM', KEYS[2], 'MINID', '0-' .. (last + 1)) end
redis.call('XADD', KEYS[2], ARGV[1], 'd', ARGV[2])
redis.call('HSET', KEYS[1], 'events', n + 1, 'event_bytes', kept)
local ttl = redis.call('TTL', KEYS[1])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
redis.call('PUBLISH', ARGV[4], ARGV[5] .. '\n' .. ARGV[2])
return 1
