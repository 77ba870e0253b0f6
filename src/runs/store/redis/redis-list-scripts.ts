import { LuaScript } from './redis-lua-script.ts'
import { TRANSITION_LUA } from './redis-scripts.ts'

// The scripts over an app's runs as a whole. Their runs' keys are built from the app's key
// prefix (passed in ARGV): they are only known as the index or the queue is read, and share the
// app's hash tag (one slot).

/**
 * Reads the app's index (redis-run-index.ts) newest first, from just after a place (score
 * `max`, run id `after`: the same score and ids from `after` up are skipped), each run's record
 * and webhook state, until `wanted` runs with a status in the filter are found, the index ends, or
 * `budget` runs were read (a sparse filter over a long index: the caller asks again from where it
 * stopped, and Redis is never held long). Members whose run is gone (expired) are removed.
 * Returns: 1 when the index ended (else 0), the score and run id of the last run read, then per run
 * found: run id, score, record, webhook state ('' none).
 * KEYS: index. ARGV: run key prefix, max score ('+inf' at the newest), after ('' none), statuses
 * ('s1,s2'; '' all), wanted, budget.
 */
export const LIST_RUNS = new LuaScript(`
local prefix, wanted, budget = ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[6])
local filter = nil
if ARGV[4] ~= '' then
  filter = {}
  for status in string.gmatch(ARGV[4], '[^,]+') do filter[status] = true end
end
local bound = nil
if ARGV[3] ~= '' then bound = tonumber(ARGV[2]) end
local out, dead = { 0, ARGV[2], ARGV[3] }, {}
local found, read, offset, stopped = 0, 0, 0, false
while not stopped do
  local batch = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[2], '-inf', 'WITHSCORES', 'LIMIT', offset, 100)
  offset = offset + #batch / 2
  for i = 1, #batch, 2 do
    local id, score = batch[i], batch[i + 1]
    if not (bound and tonumber(score) == bound and id >= ARGV[3]) then
      read = read + 1
      out[2], out[3] = score, id
      local fields = redis.call('HMGET', prefix .. id, 'record', 'webhook_state')
      if not fields[1] then
        dead[#dead + 1] = id
      elseif not filter or filter[string.match(fields[1], '"status":"(%a+)"')] then
        found = found + 1
        out[#out + 1] = id
        out[#out + 1] = score
        out[#out + 1] = fields[1]
        out[#out + 1] = fields[2] or ''
      end
      if found >= wanted or read >= budget then
        stopped = true
        break
      end
    end
  end
  if not stopped and #batch < 200 then
    out[1] = 1
    stopped = true
  end
end
if #dead > 0 then redis.call('ZREM', KEYS[1], unpack(dead)) end
return out
`)

/**
 * Cancels the queued runs among up to `count` entries of the app's queue (from the first entry
 * after `from`), each as a cancel of it does (TRANSITION: compare-and-set of its record, its entry
 * acknowledged and deleted, its bytes given back, its retention TTL, `done` to its followers), in
 * one step: a run a sidecar starts meanwhile is either canceled before (its start fails) or
 * running (left alone). Its record: the queued one with status canceled, completed_at and error.
 * Returns: how many were canceled, and the last entry read ('' none: the queue's end).
 * KEYS: queue, queued bytes, running, expiry, turns. ARGV: run key prefix, events key prefix, live channel
 * prefix, from ('-' the first, else an entry id, excluded), count, what the canceled record adds
 * (`,"completed_at":…,"error":…`), ttl seconds.
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
    canceled = canceled + transition({ run, KEYS[1], ARGV[2] .. id, KEYS[2], KEYS[3], KEYS[4], KEYS[5] },
      { old, new, '', '', fields[2] or last, ARGV[7], ARGV[3] .. id, 'done', id })
  end
end
return { canceled, last }
`)
