-- record-sync-run.lua, included: recordSyncRun(run key, index key, record, owner, webhook ('' none),
-- ttl seconds, run id, created_at ms) records a sync call running (a keyed call as it claims its
-- key, a call whose Prefer: wait ran out), owned by its sidecar and in the app's index; false when
-- the id is taken. Its last argument, sub: the token's that made the call (RUN_ACCESS), a field of the run.
--#include run-index.lua
local function recordSyncRun (runKey, index, record, owner, webhook, ttl, runId, createdAt, sub)
  if redis.call('EXISTS', runKey) == 1 then return false end
  local fields = { 'record', record, 'async', '0', 'owner', owner, 'sub', sub }
  if webhook ~= '' then fields[#fields + 1] = 'webhook'; fields[#fields + 1] = webhook end
  redis.call('HSET', runKey, unpack(fields))
  redis.call('EXPIRE', runKey, ttl)
  indexRun(index, runId, 'running', createdAt)
  return true
end
