-- DROP_ENTRY: acknowledges and deletes a stream entry nobody will act on, in one command.
-- KEYS: stream
-- ARGV: group, entry
-- Returns: 1 deleted; 0 it was gone
--
-- Not a MULTI: on a cluster, ioredis can leave a transaction's queued commands rejected and
-- unhandled when the connection closes (redis/ioredis#883).
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
