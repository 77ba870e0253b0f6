-- OPEN_RUN: records a sync call as a running run as it goes on (its `Prefer: wait` ran out).
-- KEYS: run, index
-- ARGV: record, owner, webhook, ttl seconds, run id, created at ms, sub
-- Returns: 1 recorded; -1 the run id is taken
--
-- Owned by its sidecar; like a keyed call's record (CLAIM_KEY), without a key; it joins the app's
-- index (run-index.lua). webhook: '' none.
--#include record-sync-run.lua
if not recordSyncRun(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]) then return -1 end
return 1
