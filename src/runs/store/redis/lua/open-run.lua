-- OPEN_RUN: records a sync call as a running async run as it goes on (its `Prefer: wait` ran out).
-- KEYS: run, index, queue
-- ARGV: record, owner, webhook, ttl seconds, run id, created at ms, request, body, urgency, caller, sub
-- Returns: its queue entry's id, recorded; -1 the run id is taken
--
-- Owned by its sidecar; like a keyed call's record (CLAIM_KEY), without a key; it joins the app's
-- index (run-index.lua). webhook: '' none (its secret is kept until the run ends, as SUBMIT keeps
-- it); request: '' none (attempts not counted: the run is never queued again), else kept with its
-- body as SUBMIT keeps them, for a next attempt. Like a run its sidecar took, it gets a queue entry
-- (`turn` 1: no take adopts it) straight into the sidecar's pending list (XCLAIM FORCE, the group
-- made first if it is missing): its heartbeat keeps it, and a reaper finds it should the sidecar be
-- lost (queued again, or failed `replica lost`); its end acknowledges and deletes it (TRANSITION).
-- urgency: '' none (3), with caller: its turn, should it be queued again. sub: the token's that made
-- the call (RUN_ACCESS), a field of the run.
--#include record-sync-run.lua
if not recordSyncRun(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[11]) then return -1 end
local id = redis.call('XADD', KEYS[3], '*', 'run', ARGV[5], 'turn', '1')
if not pcall(redis.call, 'XCLAIM', KEYS[3], 'runners', ARGV[2], 0, id, 'FORCE', 'JUSTID') then
  redis.call('XGROUP', 'CREATE', KEYS[3], 'runners', '0', 'MKSTREAM')
  redis.call('XCLAIM', KEYS[3], 'runners', ARGV[2], 0, id, 'FORCE', 'JUSTID')
end
local fields = { 'entry', id, 'at', ARGV[6] }
if ARGV[7] ~= '' then
  fields[#fields + 1] = 'request'; fields[#fields + 1] = ARGV[7]
  fields[#fields + 1] = 'body'; fields[#fields + 1] = ARGV[8]
end
if ARGV[9] ~= '' then
  fields[#fields + 1] = 'urgency'; fields[#fields + 1] = ARGV[9]
  fields[#fields + 1] = 'caller'; fields[#fields + 1] = ARGV[10]
end
redis.call('HSET', KEYS[1], unpack(fields))
return id
