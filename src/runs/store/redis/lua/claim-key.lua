-- CLAIM_KEY: claims an Idempotency-Key's slot unless a request holds it.
-- KEYS: claims, slot, run, index
-- ARGV: run id, digest, async, lease ms, record, owner, webhook, record ttl seconds, created at ms, lost after ms, sub
-- Returns: nil claimed; -1 the run id is taken (not claimed); {'lost', run id} the slot is a lost sidecar's sync run's; else what the slot holds: run id, digest, async, then status, content type and body once answered
--
-- async: '1' or '0'; record: '' none (an async submit); webhook: '' none.
-- A slot is a lost sidecar's when it is a sync run's whose sidecar has not renewed it for `lost
-- after` ms, by Redis's clock (FAIL_LOST_CLAIM ends that run "replica lost" first: the retry gets
-- that answer, never a second run).
-- With a record (a sync call), the run is recorded running in the same step, unless its id is
-- taken (-1: the key is not claimed then); a run recorded joins the app's index (run-index.lua),
-- and the slot is held (no lease that could lapse and free a key whose request reached the app)
-- until its answer is kept, with its sidecar's last heartbeat in the app's claims set. Without (an
-- async submit, answered at once), the slot is a lease of `lease ms`.
--#include record-sync-run.lua
--#include now.lua
if redis.call('EXISTS', KEYS[2]) == 1 then
  local held = redis.call('HMGET', KEYS[2], 'run', 'digest', 'async', 'status', 'type', 'body')
  local beat = redis.call('ZSCORE', KEYS[1], KEYS[2])
  if not held[4] and beat and tonumber(beat) < now - tonumber(ARGV[10]) then return { 'lost', held[1] } end
  return held
end
if ARGV[5] ~= '' and not recordSyncRun(KEYS[3], KEYS[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[1], ARGV[9], ARGV[11]) then return -1 end
redis.call('HSET', KEYS[2], 'run', ARGV[1], 'digest', ARGV[2], 'async', ARGV[3])
if ARGV[5] == '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
else
  redis.call('EXPIRE', KEYS[2], ARGV[8])
  redis.call('ZADD', KEYS[1], now, KEYS[2])
end
return false
