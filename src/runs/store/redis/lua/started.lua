-- started.lua, included: a queued run as it starts.
-- startedRecord(record as queued, queue time ms, started at ISO) → the record as started, as
-- run-record.ts's startedRecord makes it (`status` running, `started_at` and `queue_time_ms`), those
-- two right after `created_at` (the bytes it makes for a record without a webhook);
-- moveIndex(index, run id, from status, to status, created_at ms): the run moves between its status
-- indexes (run-index.lua) at the score it has, known to the caller (no read).
local function startedRecord (record, queueMs, startedIso)
  local head, tail = string.match(record, '^(.-"created_at":"[^"]*")(.*)$')
  head = string.gsub(head, '"status":"queued"', '"status":"running"', 1)
  return head .. ',"started_at":"' .. startedIso .. '","queue_time_ms":' .. queueMs .. tail
end
local function moveIndex (index, runId, from, to, createdAt)
  redis.call('ZREM', index .. ':' .. from, runId)
  redis.call('ZADD', index .. ':' .. to, createdAt, runId)
end
-- startedAttempt(record as started) → the record with its next attempt (RUN_MAX_ATTEMPTS above 1),
-- as run-record.ts's nextAttempt counts it: `attempt` one more than the last one's (the record's
-- first `"attempt":`, its own, before its interruptions), else 1, before `webhook` (else at the end).
local function startedAttempt (record)
  local last = string.match(record, '"attempt":(%d+)')
  if last then return (string.gsub(record, '"attempt":%d+', '"attempt":' .. (tonumber(last) + 1), 1)) end
  local webhook = string.find(record, ',"webhook":', 1, true)
  if webhook then return string.sub(record, 1, webhook - 1) .. ',"attempt":1' .. string.sub(record, webhook) end
  return string.sub(record, 1, -2) .. ',"attempt":1}'
end
