-- DELIVERY_DONE: a delivery ended: its entry acknowledged and deleted, its hash (and secret) gone.
-- KEYS: deliveries stream, delivery hash
-- ARGV: entry id
-- Returns: 1 its hash was there; 0 it was not
redis.call('XACK', KEYS[1], 'senders', ARGV[1])
redis.call('XDEL', KEYS[1], ARGV[1])
return redis.call('DEL', KEYS[2])
