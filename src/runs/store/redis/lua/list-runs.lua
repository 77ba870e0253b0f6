-- LIST_RUNS: a page of the app's runs, newest first, of the statuses asked for.
-- KEYS: index
-- ARGV: run key prefix, max score, after, statuses, wanted
-- Returns: per run (at most `wanted`): run id, score, record, webhook state ('' none)
--
-- Newest first: created_at, then run id, both descending; from just after a place (score `max
-- score`, '+inf' at the newest; run id `after`, '' none: that score's ids from `after` up are
-- skipped). statuses: 's1,s2'. Each status's index (run-index.lua) is read from that place until
-- `wanted` of its runs are found or it ends, and the newest `wanted` of them all make the page. A
-- page reads at most `wanted` live runs per status asked for, whatever the runs kept and however
-- few match; a member whose run is gone (expired) is removed from its index as it is met.
-- The runs' keys are built from the app's key prefix (ARGV), sharing the app's hash tag.
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
