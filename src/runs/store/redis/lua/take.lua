-- TAKE: takes the app's next queued run for a sidecar holding a free slot, and starts it, in one step.
-- KEYS: turns, fair, wake, queue, queued bytes, due set, index
-- ARGV: taker, run key prefix, look, capped callers, started at ms, started at iso, woken, attempts
-- Returns: {run id, entry, record as queued, urgency ('' none), caller, drained (1: no turn left, else 0), entries looked at, the urgency of the next turn ('' none), record as started, request, body, webhook (false none)[, its first event]} taken; {entries looked at} none queued; {-1, the urgency of the first} every run left is a capped caller's (or kept from its taker); 0 none taken after PAGES pages of turns (ask again)
--
-- taker: its consumer name; look: entries to read at most ('0' none); capped callers: one per
-- line ('' none); started at: the taker's clock, epoch ms and ISO 8601; woken: '1' sent behind a
-- BLPOP of the wake list (which leaves it empty when no turn is left; the take runs as the wait
-- ends, long after it was sent: it starts the run at Redis's time instead), '' else; attempts: '1'
-- attempts are counted (RUN_MAX_ATTEMPTS above 1: the reply gains the number of the run's first
-- event), '' else.
-- Counting attempts, the run's record gains its attempt (started.lua's startedAttempt), its
-- `queue_time_ms` leaves out the time its attempts before ran (`ran_ms`, RETRY's), and a run put
-- back after an interrupted attempt is passed over, as a capped caller's is, by the taker that
-- lost it (`avoid`: `<consumer> <until ms>`) until then, so that another replica with a free slot
-- takes it (a wake-up is left for one: this taker's BLPOP may have used it).
-- The first of the turn order (turn.lua) whose run is still queued and whose caller is not capped
-- at the taker (CALLER_MAX_INFLIGHT: their runs keep their place, for replicas that can start
-- them, and a wake-up is left for one, as for a run kept from its loser). The run is put in the taker's pending list of group `runners` (GROUP; XCLAIM FORCE: its
-- lease, heartbeat, takeover by the reaper and fencing work on it) and its record moves queued →
-- running, owned by the taker (`started_at` the taker's clock, Redis's behind a BLPOP, `queue_time_ms` from the run's
-- `at`: started.lua); its request, body and webhook are read in the same HMGET; it leaves the
-- queued bytes, the due set (when its `Cancel-After` put it there) and the queued index, and joins
-- the running index (as START_READ does for a run taken over). A turn whose run is gone
-- (canceled, ended) is dropped as it is passed over. The urgency's virtual time moves to the run's
-- start tag (its first write: a Redis out of memory refuses the whole take there).
-- Upkeep only where it is cheap: when the page read holds every turn left (a short queue), the
-- wake list is cut to the turns left (a waiting sidecar's BLPOP uses one up, a take without waiting
-- none); finish tags the virtual time passed go every TAG_TRIM virtual time units; with a backlog,
-- the page tells the next turn's urgency without another read. With none queued, the order's state
-- and the wake list go: the next run starts them again.
-- Runs queued by a sidecar of the version before turns (a rolling upgrade) have none: with `look`,
-- once the turn order is empty, the entries nobody has read with `>` yet are read (NOACK: nobody's
-- pending list changes), and those runs get a turn, in the order they came; this version's entries
-- (`turn` 1) are passed over. END_AND_TAKE runs this after a run's end.
--#include turn.lua
--#include started.lua
-- the first page is short: with a backlog a take uses its first turn or two, and every element a
-- ZRANGE hands the script costs Redis time (a first page of 32 turns was a third of END_AND_TAKE's)
local FIRST_PAGE, PAGE, PAGES, TAG_TRIM = 8, 32, 32, 16
local seen = 0
-- a command on the queue's group, the group made first if it is missing (the stream deleted by hand, a server restarted empty)
local function inGroup (...)
  local ok, reply = pcall(redis.call, ...)
  if ok then return reply end
  redis.call('XGROUP', 'CREATE', KEYS[4], 'runners', '0', 'MKSTREAM')
  return redis.call(...)
end
local function adoptUnread ()
  if ARGV[3] == '0' then return 0 end
  local read = inGroup('XREADGROUP', 'GROUP', 'runners', ARGV[1], 'COUNT', ARGV[3], 'NOACK', 'STREAMS', KEYS[4], '>')
  if not read then return 0 end
  for _, entry in ipairs(read[1][2]) do
    local runId = entry[2][2]
    local fields = {}
    if entry[2][3] ~= 'turn' then fields = redis.call('HMGET', ARGV[2] .. runId, 'record', 'turn', 'entry', 'urgency', 'caller') end
    if fields[1] and not fields[2] and fields[3] == entry[1] and string.find(fields[1], '"status":"queued"', 1, true) then
      local turn, at = queueTurn(KEYS[1], KEYS[2], tonumber(fields[4] or '3'), fields[5] or '', entry[1], runId)
      redis.call('HSET', ARGV[2] .. runId, 'turn', turn, 'turn_at', at)
      redis.call('RPUSH', KEYS[3], tonumber(fields[4] or '3'))
    end
  end
  seen = seen + #read[1][2]
  return #read[1][2]
end
local startedMs, startedIso = tonumber(ARGV[5]), ARGV[6]
if ARGV[7] == '1' then
  local clock = redis.call('TIME')
  startedMs = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  startedIso = isoTime(startedMs)
end
local capped = {}
for caller in string.gmatch(ARGV[4], '[^\n]+') do capped[caller] = true end
local counting = ARGV[8] == '1'
-- a run whose last attempt this taker lost, kept from it a moment
local function kept (avoid)
  local taker, untilMs = string.match(avoid or '', '^(.*) (%d+)$')
  return taker == ARGV[1] and tonumber(untilMs) > startedMs
end
local skipped, firstCapped, empty, keptFrom = 0, nil, false, nil
for round = 1, PAGES do
  local size = round == 1 and FIRST_PAGE or PAGE
  local page = redis.call('ZRANGE', KEYS[1], skipped, skipped + size - 1, 'WITHSCORES')
  if #page == 0 then
    if round == 1 and adoptUnread() > 0 then page = redis.call('ZRANGE', KEYS[1], 0, size - 1, 'WITHSCORES') end
    empty = #page == 0 and skipped == 0
    if #page == 0 then break end
  end
  local offset, removed = skipped, 0
  for i = 1, #page, 2 do
    local member, score = page[i], tonumber(page[i + 1])
    local urgency = math.floor(score / TURN_SPAN)
    local rest = string.sub(member, 24)
    local space = string.find(rest, ' ', 1, true)
    local runId = space and string.sub(rest, 1, space - 1) or rest
    if space and capped[string.sub(rest, space + 1)] then
      skipped = skipped + 1
      firstCapped = firstCapped or urgency
    else
      local runKey = ARGV[2] .. runId
      local fields = redis.call('HMGET', runKey, 'record', 'entry', 'urgency', 'caller', 'request', 'body', 'webhook', 'queued_bytes', 'at', 'expires')
      local valid = fields[1] and fields[2] and string.find(fields[1], '"status":"queued"', 1, true)
      local attempts = counting and valid and redis.call('HMGET', runKey, 'ran_ms', 'avoid', 'events')
      local keep = attempts and kept(attempts[2])
      if keep then
        skipped = skipped + 1
        firstCapped = firstCapped or urgency
        keptFrom = keptFrom or urgency
        valid = false
      end
      local tag = score - urgency * TURN_SPAN
      -- the first write may grow memory: a Redis out of memory refuses the whole take there, not halfway
      if valid then redis.call('ZADD', KEYS[2], score, 'v' .. urgency) end
      if not keep then
        redis.call('ZREM', KEYS[1], member)
        removed = removed + 1
      end
      if valid and #inGroup('XCLAIM', KEYS[4], 'runners', ARGV[1], 0, fields[2], 'FORCE', 'JUSTID') == 1 then
        -- the turns left: known when the page holds them all
        local short = #page < 2 * size
        local left = short and (offset + #page / 2 - removed) or -1
        if left == 0 and adoptUnread() > 0 then left = redis.call('ZCARD', KEYS[1]) end
        -- finish tags the virtual time passed, now and then: the order's state stays while runs are
        -- taken one after another (a caller's runs taken still count against its next), and goes
        -- when a take finds none queued
        if tag % TAG_TRIM == 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], urgency * TURN_SPAN, '(' .. score) end
        if left == 0 then
          -- behind a wake-up (BLPOP) the list is empty already, but for wake-ups of runs taken since
          if ARGV[7] ~= '1' then redis.call('DEL', KEYS[3]) end
        elseif short then redis.call('LTRIM', KEYS[3], 0, left - 1) end
        local next = ''
        if firstCapped then next = firstCapped
        elseif page[i + 3] then next = math.floor(tonumber(page[i + 3]) / TURN_SPAN)
        elseif left ~= 0 then
          local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
          if first[2] then next = math.floor(tonumber(first[2]) / TURN_SPAN) end
        end
        local created = tonumber(fields[9] or redis.call('ZSCORE', KEYS[7] .. ':queued', runId) or startedMs)
        local ran = attempts and tonumber(attempts[1] or '0') or 0
        local record = startedRecord(fields[1], startedMs - created - ran, startedIso)
        if counting then record = startedAttempt(record) end
        redis.call('HSET', runKey, 'record', record, 'owner', ARGV[1], 'queued_bytes', 0)
        moveIndex(KEYS[7], runId, 'queued', 'running', created)
        if fields[10] then redis.call('ZREM', KEYS[6], runId) end
        local queued = tonumber(fields[8] or '0')
        if queued > 0 and redis.call('DECRBY', KEYS[5], queued) < 0 then redis.call('SET', KEYS[5], 0) end
        local reply = { runId, fields[2], fields[1], fields[3] or '', fields[4] or '', left == 0 and 1 or 0, seen, next, record, fields[5] or false, fields[6] or false, fields[7] or false }
        if counting then reply[13] = tonumber(attempts[3] or '0') end
        return reply
      end
    end
  end
  if #page < 2 * size and removed == 0 then break end
end
if empty or (skipped == 0 and redis.call('EXISTS', KEYS[1]) == 0) then
  redis.call('DEL', KEYS[2], KEYS[3])
  return { seen }
end
if firstCapped then
  -- a wake-up left for a replica that can take them (this taker's BLPOP may have used it: one idle
  -- elsewhere would else wait out its BLOCK_SECONDS)
  if redis.call('LLEN', KEYS[3]) == 0 then redis.call('RPUSH', KEYS[3], keptFrom or firstCapped) end
  return { -1, firstCapped }
end
return 0
