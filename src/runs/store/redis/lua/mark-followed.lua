-- MARK_FOLLOWED: a follower of the run is listening on its live channel: its ends are told there from now on.
-- KEYS: run
-- ARGV: none
-- Returns: 1 marked; 0 the run is gone (expired): not recreated
--
-- TRANSITION publishes `done` only for a run followed. Sent after the follower subscribed and
-- before it reads the run: an end written before this is read, one after it is heard.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'followed', '1')
return 1
