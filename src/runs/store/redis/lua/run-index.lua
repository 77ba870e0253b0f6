-- run-index.lua, included: the app's index of its recorded runs (redis-run-index.ts).
-- One sorted set per status (`as:{project/app}:runs:<status>`, from ScopeKeys.runs; score the
-- run's created_at in ms, member its run id), kept in the step that records or moves the run: a
-- run is in its status's set only, so a page of one status reads that status's runs, never the
-- others (a filter that matches nothing reads nothing). A finished run's set is trimmed by time
-- as a run ends in it (members created before the trim's cutoff, whose runs have expired); a
-- member whose run hash is gone (expired sooner) is removed as a listing meets it. The sets have
-- no TTL: five keys per app.
-- statusOf(record JSON) → its status;
-- indexRun(index, run id, status, created_at ms): a run recorded;
-- reindexRun(index, run id, old status, new status, cutoff ms ('' none)): a run moved, at its
-- score; with a cutoff, its new status's members created before it go.
local function statusOf (record)
  return string.match(record, '"status":"(%a+)"')
end
local function indexRun (index, runId, status, createdAt)
  redis.call('ZADD', index .. ':' .. status, createdAt, runId)
end
local function reindexRun (index, runId, from, to, cutoff)
  if not from or not to or from == to then return end
  local at = redis.call('ZSCORE', index .. ':' .. from, runId)
  if not at then return end
  redis.call('ZREM', index .. ':' .. from, runId)
  redis.call('ZADD', index .. ':' .. to, at, runId)
  if cutoff and cutoff ~= '' then redis.call('ZREMRANGEBYSCORE', index .. ':' .. to, '-inf', '(' .. cutoff) end
end
