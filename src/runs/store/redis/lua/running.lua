-- RUNNING: the app's async runs taken and not ended.
-- KEYS: queue, turns
-- ARGV: none
-- Returns: the queue's entries less its turns (one entry per run queued or taken, until it ends; one turn per run queued)
return redis.call('XLEN', KEYS[1]) - redis.call('ZCARD', KEYS[2])
