import { LuaScript } from './redis-lua-script.ts'
import { TRANSITION_LUA } from './redis-scripts.ts'

// The scripts over an app's runs as a whole. Their runs' keys are built from the app's key
// prefix (passed in ARGV): they are only known as the index or the queue is read, and share the
// app's hash tag (one slot).

/**
 * A page of the app's runs, newest first (created_at, then run id, both descending), from just
 * after a place (score `max`, run id `after`: that score's ids from `after` up are skipped), of the
 * statuses asked for: each status's index (redis-run-index.ts) is read from that place until
 * `wanted` of its runs are found or it ends, and the newest `wanted` of them all make the page. A
 * page reads at most `wanted` live runs per status asked for, whatever the runs kept and however
 * few match; a member whose run is gone (expired) is removed from its index as it is met.
 * Returns, per run (at most `wanted`): run id, score, record, webhook state ('' none).
 * KEYS: index. ARGV: run key prefix, max score ('+inf' at the newest), after ('' none), statuses
 * ('s1,s2'), wanted.
 */
export const LIST_RUNS = new LuaScript(`
local prefix, wanted = ARGV[1], tonumber(ARGV[5])
local bound = nil
if ARGV[3] ~= '' then bound = tonumber(ARGV[2]) end
local found = {}
for status in string.gmatch(ARGV[4], '[^,]+') do
  local index = KEYS[1] .. ':' .. status
  local dead, mine, offset = {}, 0, 0
  while mine < wanted do
    local batch = redis.call('ZREVRANGEBYSCORE', index, ARGV[2], '-inf', 'WITHSCORES', 'LIMIT', offset, wanted - mine)
    if #batch == 0 then break end
    offset = offset + #batch / 2
    for i = 1, #batch, 2 do
      local id, score = batch[i], batch[i + 1]
      if not (bound and tonumber(score) == bound and id >= ARGV[3]) then
        local fields = redis.call('HMGET', prefix .. id, 'record', 'webhook_state')
        if fields[1] then
          mine = mine + 1
          found[#found + 1] = { id, score, fields[1], fields[2] or '' }
        else
          dead[#dead + 1] = id
        end
      end
    end
  end
  if #dead > 0 then redis.call('ZREM', index, unpack(dead)) end
end
table.sort(found, function (a, b)
  local sa, sb = tonumber(a[2]), tonumber(b[2])
  if sa ~= sb then return sa > sb end
  return a[1] > b[1]
end)
local out = {}
for i = 1, math.min(wanted, #found) do
  for _, value in ipairs(found[i]) do out[#out + 1] = value end
end
return out
`)

/**
 * Cancels the queued runs among up to `count` entries of the app's queue (from the first entry
 * after `from`), each as a cancel of it does (TRANSITION: compare-and-set of its record, its entry
 * acknowledged and deleted, its bytes given back, its retention TTL, `done` to its followers), in
 * one step: a run a sidecar starts meanwhile is either canceled before (its start fails) or
 * running (left alone). Its record: the queued one with status canceled, completed_at and error.
 * Returns: how many were canceled, and the last entry read ('' none: the queue's end).
 * KEYS: queue, queued bytes, running, expiry, turns, index. ARGV: run key prefix, events key prefix, live channel
 * prefix, from ('-' the first, else an entry id, excluded), count, what the canceled record adds
 * (`,"completed_at":…,"error":…`), ttl seconds, index cutoff ms.
 */
export const CANCEL_QUEUED = new LuaScript(`
local function transition (KEYS, ARGV)${TRANSITION_LUA}end
local from = ARGV[4]
if from ~= '-' then from = '(' .. from end
local entries = redis.call('XRANGE', KEYS[1], from, '+', 'COUNT', ARGV[5])
local canceled, last = 0, ''
for _, entry in ipairs(entries) do
  last = entry[1]
  local id = entry[2][2]
  local run = ARGV[1] .. id
  local fields = redis.call('HMGET', run, 'record', 'entry')
  local old = fields[1]
  if old and string.find(old, '"status":"queued"', 1, true) then
    local new = string.gsub(old, '"status":"queued"', '"status":"canceled"', 1)
    new = string.sub(new, 1, -2) .. ARGV[6] .. '}'
    canceled = canceled + transition({ run, KEYS[1], ARGV[2] .. id, KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6] },
      { old, new, '', '', fields[2] or last, ARGV[7], ARGV[3] .. id, 'done', id, ARGV[8] })
  end
end
return { canceled, last }
`)
