-- LEAVE_DELIVERY: a delivery left for another sidecar: idle as a lost sidecar's, and due at once.
-- KEYS: deliveries stream, due set
-- ARGV: group, consumer, entry, idle ms, member
-- Returns: 1 the member was added to the due set; 0 it was there
--
-- Its entry made idle as long as a lost sidecar's (XCLAIM ... IDLE), and due in the app's due set
-- at once, in one step sent behind this sidecar's earlier refreshes (a heartbeat's refresh sent
-- before it cannot make it less idle after).
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
return redis.call('ZADD', KEYS[2], 0, ARGV[5])
