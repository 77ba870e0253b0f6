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
-- isoTime(epoch ms) → its ISO 8601 UTC text, as JavaScript's toISOString writes it (a take behind
-- a BLPOP starts its run at Redis's time: civil date from days, Howard Hinnant's algorithm).
local function isoTime (ms)
  local days = math.floor(ms / 86400000)
  local rest = ms - days * 86400000
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local day = doy - math.floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400 + (month <= 2 and 1 or 0)
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', year, month, day,
    math.floor(rest / 3600000), math.floor(rest / 60000) % 60, math.floor(rest / 1000) % 60, rest % 1000)
end
