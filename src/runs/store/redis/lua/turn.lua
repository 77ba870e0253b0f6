-- turn.lua, included: an app's turn order (`…:turns`, a sorted set of its queued runs).
-- Scores: urgency × TURN_SPAN plus the run's start tag, so that every run of urgency u comes before
-- any of urgency u + 1. Within one urgency, start-time fair queuing across callers: a caller's next
-- run starts at the later of the urgency's virtual time (the start tag of its run taken last:
-- member `v<u>` of `…:fair`) and the caller's finish tag (its last run's start + 1, `…:fair`,
-- member `<u> <caller>`), both read in one ZMSCORE, so a caller with 1,000 runs queued has them at
-- tags t, t + 1, …, and another caller's one run comes at the virtual time: next but one. Runs of
-- equal score are taken as they came (the member is the submission's stream id, zero-padded, the
-- run id, a space and the caller), each caller's own in order. Tags of callers whose finish tag the
-- virtual time has passed are dropped now and then as runs are taken; the whole state goes when a
-- take finds the queue empty, so the tags stay small.
-- queueTurn(turns, fair, urgency, caller, sortable id, run id) → member, score (the caller puts
-- them in the run's hash: `turn`, `turn_at`, for RELEASE and cancels).
local TURN_SPAN = 1099511627776
local function queueTurn (turns, fair, urgency, caller, id, runId)
  local base = urgency * TURN_SPAN
  local tag = urgency .. ' ' .. caller
  local known = redis.call('ZMSCORE', fair, 'v' .. urgency, tag)
  local start = known[1] and tonumber(known[1]) - base or 0
  if known[2] and tonumber(known[2]) - base > start then start = tonumber(known[2]) - base end
  redis.call('ZADD', fair, base + start + 1, tag)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local member = string.rep('0', 15 - #ms) .. ms .. string.rep('0', 8 - #seq) .. seq .. runId .. ' ' .. caller
  redis.call('ZADD', turns, base + start, member)
  return member, base + start
end
