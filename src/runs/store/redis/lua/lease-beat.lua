-- LEASE_BEAT: a holding sidecar's lease in the app's due set, due `lost after` ms after now.
-- KEYS: due set
-- ARGV: member, lost after ms
-- Returns: 1 the member was added; 0 its time moved
--
-- By Redis's clock (the one XAUTOCLAIM's idle times and the claims set use: a sidecar's own clock
-- may be off). Written after the beat's refreshes, so when it falls due what it held is idle that
-- long (redis-due.ts).
--#include now.lua
return redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
