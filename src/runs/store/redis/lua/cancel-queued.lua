-- CANCEL_QUEUED: cancels the queued runs among up to `count` entries of the app's queue, in one step.
-- KEYS: queue, queued bytes, old running set, expiry, turns, index
-- ARGV: run key prefix, events key prefix, live channel prefix, from, count, canceled fields, ttl seconds, index cutoff ms, by sub, sub
-- Returns: {how many were canceled, the last entry read ('' none: the queue's end)}
--
-- From the first entry after `from` ('-' the first, else an entry id, excluded). Each as a cancel
-- of it does: transition(KEYS, ARGV), transition.lua put before this file as a function by its
-- definition (compare-and-set of its record, its entry acknowledged and deleted, its bytes given
-- back, its retention TTL, `done` to its followers): a run a sidecar starts meanwhile is either
-- canceled before (its start fails) or running (left alone). Its record: the queued one with
-- status canceled and the canceled fields (`,"completed_at":...,"error":...`) added. by sub: '1'
-- cancels only the runs whose `sub` field is `sub` (RUN_ACCESS caller; a run without one is
-- nobody's), '' every queued run.
-- The runs' keys are built from the app's key prefixes (ARGV), sharing the app's hash tag.
local from = ARGV[4]
if from ~= '-' then from = '(' .. from end
local entries = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', ARGV[5])
local canceled, last = 0, ''
for _, entry in ipairs(entries) do
  last = entry[1]
  local id = entry[2][2]
  local run = ARGV[1] .. id
  local fields = redis.call('HMGET', run, 'record', 'entry', 'sub')
  local old = fields[1]
  if old and (ARGV[9] == '' or fields[3] == ARGV[10]) and string.find(old, '"status":"queued"', 1, true) then
    local new = string.gsub(old, '"status":"queued"', '"status":"canceled"', 1)
    new = string.sub(new, 1, -2) .. ARGV[6] .. '}'
    canceled = canceled + transition({ run, KEYS[1], ARGV[2] .. id, KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6] },
      { old, new, '', '', fields[2] or last, ARGV[7], ARGV[3] .. id, 'done', id, ARGV[8] })
  end
end
return { canceled, last }
