-- HOLD_DELIVERY: writes a webhook delivery down and holds it in this sidecar's pending list.
-- KEYS: deliveries stream, delivery hash
-- ARGV: run id, url, body, secret, consumer, ttl seconds, delivery id, traceparent, tracestate
-- Returns: the stream entry id
--
-- The entry goes straight into the consumer's pending list of group `senders` (SENDERS; XCLAIM
-- FORCE: nobody reads the stream, sidecars only take over idle entries), its first attempt
-- counted (it begins at once). secret, traceparent: '' none. END_AND_HOLD runs this after a run's end.
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('XGROUP', 'CREATE', KEYS[1], 'senders', '0', 'MKSTREAM') end
local id = redis.call('XADD', KEYS[1], '*', 'delivery', ARGV[7])
if not pcall(redis.call, 'XCLAIM', KEYS[1], 'senders', ARGV[5], 0, id, 'FORCE', 'JUSTID') then
  -- the stream without its group (deleted by hand): made again
  redis.call('XGROUP', 'CREATE', KEYS[1], 'senders', '0')
  redis.call('XCLAIM', KEYS[1], 'senders', ARGV[5], 0, id, 'FORCE', 'JUSTID')
end
local fields = { 'run', ARGV[1], 'url', ARGV[2], 'body', ARGV[3], 'attempts', 1, 'entry', id }
if ARGV[4] ~= '' then fields[#fields + 1] = 'secret'; fields[#fields + 1] = ARGV[4] end
if ARGV[8] ~= '' then
  fields[#fields + 1] = 'traceparent'; fields[#fields + 1] = ARGV[8]
  fields[#fields + 1] = 'tracestate'; fields[#fields + 1] = ARGV[9]
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('EXPIRE', KEYS[2], ARGV[6])
return id
