/**
 * The app's index of its recorded runs, written where a run is recorded (SUBMIT, CLAIM_KEY) in the
 * same step: a sorted set `as:{project/app}:runs` (ScopeKeys.runs), score the run's created_at in
 * ms, member its run id. It has no TTL (one key per app); members whose run hash is gone are
 * removed as they are met: by a listing, and here, a few per run recorded (the oldest, and two at
 * a place that moves with the time), so that the set stays within about twice the runs held,
 * whatever lives long at its old end.
 * Lua, prepended to a script: indexRun(index key, the run's key, run id, created_at ms).
 */
export const INDEX_RUN_LUA = `
local function indexRun (index, runKey, runId, createdAt)
  local prefix = string.sub(runKey, 1, #runKey - #runId)
  local count = redis.call('ZCARD', index)
  if count > 0 then
    local at = tonumber(createdAt) % count
    local seen = redis.call('ZRANGE', index, 0, 0)
    for _, id in ipairs(redis.call('ZRANGE', index, at, at + 1)) do seen[#seen + 1] = id end
    for _, id in ipairs(seen) do
      if redis.call('EXISTS', prefix .. id) == 0 then redis.call('ZREM', index, id) end
    end
  end
  redis.call('ZADD', index, createdAt, runId)
end
`
