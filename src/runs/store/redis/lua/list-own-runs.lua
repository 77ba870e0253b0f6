-- LIST_OWN_RUNS: one step of a page of one caller's runs (RUN_ACCESS caller), newest first, of the statuses asked for.
-- KEYS: index
-- ARGV: run key prefix, max score, after, statuses, wanted, sub, budget
-- Returns: {where the step stopped ('' nothing more to read, else '<score> <run id>' of the last run read), then per run (at most `wanted`): run id, score, record, webhook state ('' none)}
--
-- From the same place as LIST_RUNS (score `max score`, '+inf' at the newest; run id `after`, ''
-- none). The statuses' indexes (run-index.lua) are read merged, in the list's order (created_at,
-- then run id, both descending), and a run counts when its hash's `sub` is `sub` (a run without
-- one, recorded by an older version, is nobody's). The step ends when `wanted` runs are found,
-- every index is read to its end, or `budget` runs were read: then it says where it stopped, and
-- the next step goes on from just after that run, so a page is the caller's next runs whatever
-- the others' between them, and no step holds Redis for more than `budget` runs. A member whose
-- run is gone (expired) is removed from its index as it is met.
-- The runs' keys are built from the app's key prefix (ARGV), sharing the app's hash tag.
local prefix, wanted, sub, budget = ARGV[1], tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
local bound = nil
if ARGV[3] ~= '' then bound = tonumber(ARGV[2]) end
local BATCH = 64
local heads = {}
for status in string.gmatch(ARGV[4], '[^,]+') do
  heads[#heads + 1] = { index = KEYS[1] .. ':' .. status, offset = 0, batch = {}, at = 1, ended = false, dead = {} }
end
-- a head's next member (id, score as read, score), its next batch read when it needs one; nil at its end
local function peek (head)
  if head.at > #head.batch then
    if head.ended then return nil end
    head.batch = redis.call('ZREVRANGEBYSCORE', head.index, ARGV[2], '-inf', 'WITHSCORES', 'LIMIT', head.offset, BATCH)
    head.offset = head.offset + #head.batch / 2
    head.at = 1
    head.ended = #head.batch < BATCH * 2
    if #head.batch == 0 then return nil end
  end
  return head.batch[head.at], head.batch[head.at + 1], tonumber(head.batch[head.at + 1])
end
local found, read, last = {}, 0, ''
while #found < wanted and read < budget do
  local best, id, text, score = nil, nil, nil, nil
  for _, head in ipairs(heads) do
    local i, t, s = peek(head)
    if i and (not best or s > score or (s == score and i > id)) then best, id, text, score = head, i, t, s end
  end
  if not best then break end
  best.at = best.at + 2
  -- the runs of the bound's score from `after` up were on the pages before
  if not (bound and score == bound and id >= ARGV[3]) then
    read = read + 1
    last = text .. ' ' .. id
    local fields = redis.call('HMGET', prefix .. id, 'record', 'webhook_state', 'sub')
    if not fields[1] then
      best.dead[#best.dead + 1] = id
    elseif fields[3] == sub then
      found[#found + 1] = { id, text, fields[1], fields[2] or '' }
    end
  end
end
for _, head in ipairs(heads) do
  if #head.dead > 0 then redis.call('ZREM', head.index, unpack(head.dead)) end
end
-- stopped by the budget alone: the next step goes on after the last run read
local out = { '' }
if #found < wanted and read == budget then out[1] = last end
for _, run in ipairs(found) do
  for _, value in ipairs(run) do out[#out + 1] = value end
end
return out
