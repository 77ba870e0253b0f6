-- RETRY: a run whose attempt was interrupted goes back to the queue for its next attempt, in one step.
-- KEYS: run, queue, turns, fair, wake, queued bytes, due set, index, events
-- ARGV: old record, new record, entry, run id, ran ms, avoid, event, live channel
-- Returns: the number of its retry event, queued again; -1 the record was not `old record` (a cancel, an end, a takeover): nothing written
--
-- old record: the record as its attempt left it (compare and set); new record: queued, with its
-- interruptions (run-record.ts's retriedRecord); entry: its queue entry ('' none); ran ms: the
-- time the attempt ran (added to `ran_ms`: TAKE's queue_time_ms leaves it out); avoid:
-- `<consumer> <until ms>`, the sidecar that lost it, which TAKE passes it over for until then;
-- event: the retry event's data (`{"attempt": <next>, "reason": …}`).
-- Its entry is acknowledged and deleted and a new one added; its hash is queued again as RELEASE
-- leaves a run (its bytes counted, its index and due set time back), owned by nobody (`owner` ''),
-- so that no sidecar appends to it until its next taker does. Its turn keeps its place: the
-- member it had (its submission's id orders it among equals), at the urgency's virtual time if its
-- own tag is later, so it comes before every run of its urgency submitted after it. Its retry
-- event is appended to its events as event n (the next number, field `r`, not `d`) and told to
-- its followers (`r<n>\n<data>`); a wake-up of its urgency is pushed.
--#include turn.lua
--#include started.lua
local current = redis.call('HMGET', KEYS[1], 'record', 'turn', 'turn_at', 'urgency', 'caller', 'at', 'expires', 'events', 'event_bytes')
if current[1] ~= ARGV[1] then return -1 end
local n = tonumber(current[8] or '0')
local bytes = redis.call('HSTRLEN', KEYS[1], 'body')
local id = redis.call('XADD', KEYS[2], '*', 'run', ARGV[4], 'turn', '1')
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'owner', '', 'entry', id, 'queued_bytes', bytes, 'avoid', ARGV[6],
  'events', n + 1, 'event_bytes', tonumber(current[9] or '0') + string.len(ARGV[7]))
redis.call('HINCRBY', KEYS[1], 'ran_ms', ARGV[5])
if ARGV[3] ~= '' then
  redis.call('XACK', KEYS[2], 'runners', ARGV[3])
  redis.call('XDEL', KEYS[2], ARGV[3])
end
moveIndex(KEYS[8], ARGV[4], 'running', 'queued', current[6] or redis.call('ZSCORE', KEYS[8] .. ':running', ARGV[4]) or 0)
if current[7] then redis.call('ZADD', KEYS[7], current[7], ARGV[4]) end
if bytes > 0 then redis.call('INCRBY', KEYS[6], bytes) end
local urgency = tonumber(current[4] or '3')
if current[2] then
  local base = urgency * TURN_SPAN
  local virtual = tonumber(redis.call('ZSCORE', KEYS[4], 'v' .. urgency) or base)
  local score = math.min(tonumber(current[3] or virtual), virtual)
  redis.call('ZADD', KEYS[3], score, current[2])
  redis.call('HSET', KEYS[1], 'turn_at', score)
else
  local turn, at = queueTurn(KEYS[3], KEYS[4], urgency, current[5] or '', id, ARGV[4])
  redis.call('HSET', KEYS[1], 'turn', turn, 'turn_at', at)
end
redis.call('RPUSH', KEYS[5], urgency)
redis.call('XADD', KEYS[9], '0-' .. (n + 1), 'r', ARGV[7])
redis.call('PUBLISH', ARGV[8], 'r' .. n .. '\n' .. ARGV[7])
return n
