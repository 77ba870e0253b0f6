import { INDEX_RUN_LUA } from './redis-run-index.ts'
import { LuaScript } from './redis-lua-script.ts'

/** The consumer group every sidecar holds an app's taken runs in (the reaper takes a lost sidecar's over). */
export const GROUP = 'runners'

/**
 * Scores of an app's turn order (`…:turns`, a sorted set of its queued runs): urgency × TURN_SPAN
 * plus the run's start tag, so that every run of urgency u comes before any of urgency u + 1.
 * Within one urgency, start-time fair queuing across callers: a caller's next run starts at the
 * later of the urgency's virtual time (the start tag of its run taken last: member `v<u>` of
 * `…:fair`) and the caller's finish tag (its last run's start + 1, `…:fair`, member `<u> <caller>`),
 * both read in one ZMSCORE, so a caller with 1,000 runs queued has them at tags t, t + 1, …, and
 * another caller's one run comes at the virtual time: next but one. Runs of equal score are taken
 * as they came (the member is the submission's stream id, zero-padded, the run id, a space and the
 * caller), each caller's own in order. Tags of callers whose finish tag the virtual time has passed
 * are dropped now and then as runs are taken; the whole state goes when a take finds the queue
 * empty, so the tags stay small.
 * Lua, prepended to a script: queueTurn(turns, fair, urgency, caller, sortable id, run id)
 * → member, score (the caller puts them in the run's hash: `turn`, `turn_at`, for RELEASE and cancels).
 */
const TURN_LUA = `
local TURN_SPAN = ${2 ** 40}
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
`

/**
 * Lua, prepended to a script:
 * - startedRecord(record as queued, queue time ms, started at ISO) → the record as started, the
 *   bytes run-record.ts's startedRecord makes (`status` running, `started_at` and `queue_time_ms`
 *   after `created_at`);
 * - moveIndex(index, run id, from status, to status, created_at ms): the run moves between its
 *   status indexes (redis-run-index.ts) at the score it has, known to the caller (no read).
 */
export const STARTED_LUA = `
local function startedRecord (record, queueMs, startedIso)
  local head, tail = string.match(record, '^(.-"created_at":"[^"]*")(.*)$')
  head = string.gsub(head, '"status":"queued"', '"status":"running"', 1)
  return head .. ',"started_at":"' .. startedIso .. '","queue_time_ms":' .. queueMs .. tail
end
local function moveIndex (index, runId, from, to, createdAt)
  redis.call('ZREM', index .. ':' .. from, runId)
  redis.call('ZADD', index .. ':' .. to, createdAt, runId)
end
`

/**
 * Records a queued run and queues it, unless the id is taken (-1), ASYNC_QUEUE_DEPTH runs already
 * wait (-2: waiting = the turns in the order; a run leaves it as it is taken, and starts) or their
 * bodies would pass ASYNC_QUEUE_MAX_BYTES (-3). The body's bytes are counted in the app's
 * queued-bytes until the run leaves the queue (TAKE, START_READ, or TRANSITION for a cancel); with
 * no turn left in the queue, nothing is counted (the count starts again from this body).
 * The stream entry names the run and says it has a turn: it is what a taker holds (its pending
 * list, the reaper, fencing).
 * The run takes its turn (TURN_LUA: by urgency, fair across callers) and a wake-up goes in the
 * app's wake list, its urgency (a taker blocked on it takes the next run, and knows how urgent the
 * queue's first run is at least, as it competes with waiting calls). It joins the app's queued
 * index (redis-run-index.ts), which is also where ASYNC_QUEUE_TTL_SECONDS finds it (redis-due.ts:
 * the index's oldest); a sooner `Cancel-After` (`expiry` given) puts it in the app's due set too,
 * which it leaves as it starts or ends, and its hash keeps that time (`expires`: a run given back
 * finds it). Its created_at (`at`, ms) goes in its hash: a move between indexes reads its score there.
 * Its `Priority` urgency and caller, when given, go in the record's hash (TAKE hands them to the
 * taker's gate and CALLER_MAX_INFLIGHT); without, its turn is urgency 3's, caller ''.
 * The first write is the bytes' count (a Redis out of memory refuses the whole script there).
 * KEYS: run, queue, queued bytes, due set, index, turns, fair, wake.
 * ARGV: record, request, body, webhook ('' none), depth, run id, max bytes, expiry (epoch ms; ''
 * none sooner than the queue's TTL), created_at ms, urgency ('' none), caller.
 */
export const SUBMIT = new LuaScript(`${INDEX_RUN_LUA}${TURN_LUA}
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local waiting = redis.call('ZCARD', KEYS[6])
if waiting >= tonumber(ARGV[5]) then return -2 end
local bytes = string.len(ARGV[3])
if bytes > tonumber(ARGV[7]) then return -3 end
if waiting == 0 then
  redis.call('SET', KEYS[3], bytes)
elseif bytes > 0 and redis.call('INCRBY', KEYS[3], bytes) > tonumber(ARGV[7]) then
  redis.call('DECRBY', KEYS[3], bytes)
  return -3
end
local id = redis.call('XADD', KEYS[2], '*', 'run', ARGV[6], 'turn', '1')
local turn, at = queueTurn(KEYS[6], KEYS[7], tonumber(ARGV[10]) or 3, ARGV[11], id, ARGV[6])
local fields = { 'record', ARGV[1], 'request', ARGV[2], 'body', ARGV[3], 'async', '1', 'entry', id, 'queued_bytes', bytes, 'turn', turn, 'turn_at', at, 'at', ARGV[9] }
if ARGV[8] ~= '' then fields[#fields + 1] = 'expires'; fields[#fields + 1] = ARGV[8] end
if ARGV[4] ~= '' then fields[#fields + 1] = 'webhook'; fields[#fields + 1] = ARGV[4] end
if ARGV[10] ~= '' then fields[#fields + 1] = 'urgency'; fields[#fields + 1] = ARGV[10]; fields[#fields + 1] = 'caller'; fields[#fields + 1] = ARGV[11] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('RPUSH', KEYS[8], tonumber(ARGV[10]) or 3)
if ARGV[8] ~= '' then redis.call('ZADD', KEYS[4], ARGV[8], ARGV[6]) end
indexRun(KEYS[5], ARGV[6], 'queued', ARGV[9])
return 1
`)

/**
 * Takes the app's next queued run for a sidecar holding a free slot, and starts it, in one step:
 * the first of the turn order whose run is still queued and whose caller is not capped at the
 * taker (CALLER_MAX_INFLIGHT: `capped`, its callers one per line; their runs keep their place, for
 * replicas that can start them). The run is put in the taker's pending list (XCLAIM FORCE: its
 * lease, heartbeat, takeover by the reaper and fencing work on it) and its record moves queued →
 * running, owned by the taker (`started_at` the taker's clock, `queue_time_ms` from the run's
 * `at`); its request, body and webhook are read in the same HMGET; it leaves the queued bytes, the
 * due set (when its `Cancel-After` put it there) and the queued index, and joins the running index
 * (as START_READ does for a run taken over). A turn whose run is gone (canceled, ended) is dropped
 * as it is passed over. The urgency's virtual time moves to the run's start tag (its first write:
 * a Redis out of memory refuses the whole take there).
 * Upkeep only where it is cheap: when the page read holds every turn left (a short queue), the
 * wake list is cut to the turns left (a waiting sidecar's BLPOP uses one up, a take without waiting
 * none); finish tags the virtual time passed go every TAG_TRIM virtual time units; with a backlog,
 * the page tells the next turn's urgency without another read.
 * Runs queued by a sidecar of the version before turns (a rolling upgrade) have none: with `look`
 * (a page size; '0' none), once the turn order is empty, the entries nobody has read with `>` yet
 * are read (NOACK: nobody's pending list changes), and those runs get a turn, in the order they
 * came; this version's entries (`turn` 1) are passed over.
 * Returns {run id, entry, record as queued, urgency ('' none), caller, drained (1: no turn left,
 * else 0), entries looked at, the urgency of the next turn ('' none), record as started, request,
 * body, webhook (false none)}; {entries looked at} when none is queued (the order's state and the
 * wake list go: the next run starts them again); {-1, urgency of the first} when every run left is
 * a capped caller's; 0 after looking at PAGES × PAGE turns, none to take (ask again).
 * KEYS: turns, fair, wake, queue, queued bytes, due set, index.
 * ARGV: taker (its consumer name), run key prefix, look (entries to read at most; '0' none),
 * capped callers (one per line; '' none), started at (epoch ms), started at (ISO 8601), woken
 * ('1': sent behind a BLPOP of the wake list, which leaves it empty when no turn is left; '' else).
 */
export const TAKE_LUA = `${TURN_LUA}${STARTED_LUA}
local PAGE, PAGES, TAG_TRIM = 32, 32, 16
local seen = 0
-- a command on the queue's group, the group made first if it is missing (the stream deleted by hand, a server restarted empty)
local function inGroup (...)
  local ok, reply = pcall(redis.call, ...)
  if ok then return reply end
  redis.call('XGROUP', 'CREATE', KEYS[4], '${GROUP}', '0', 'MKSTREAM')
  return redis.call(...)
end
local function adoptUnread ()
  if ARGV[3] == '0' then return 0 end
  local read = inGroup('XREADGROUP', 'GROUP', '${GROUP}', ARGV[1], 'COUNT', ARGV[3], 'NOACK', 'STREAMS', KEYS[4], '>')
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
local capped = {}
for caller in string.gmatch(ARGV[4], '[^\\n]+') do capped[caller] = true end
local skipped, firstCapped, empty = 0, nil, false
for round = 1, PAGES do
  local page = redis.call('ZRANGE', KEYS[1], skipped, skipped + PAGE - 1, 'WITHSCORES')
  if #page == 0 then
    if round == 1 and adoptUnread() > 0 then page = redis.call('ZRANGE', KEYS[1], 0, PAGE - 1, 'WITHSCORES') end
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
      local tag = score - urgency * TURN_SPAN
      -- the first write may grow memory: a Redis out of memory refuses the whole take there, not halfway
      if valid then redis.call('ZADD', KEYS[2], score, 'v' .. urgency) end
      redis.call('ZREM', KEYS[1], member)
      removed = removed + 1
      if valid and #inGroup('XCLAIM', KEYS[4], '${GROUP}', ARGV[1], 0, fields[2], 'FORCE', 'JUSTID') == 1 then
        -- the turns left: known when the page holds them all
        local short = #page < 2 * PAGE
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
        local created = tonumber(fields[9] or redis.call('ZSCORE', KEYS[7] .. ':queued', runId) or ARGV[5])
        local record = startedRecord(fields[1], tonumber(ARGV[5]) - created, ARGV[6])
        redis.call('HSET', runKey, 'record', record, 'owner', ARGV[1], 'queued_bytes', 0)
        moveIndex(KEYS[7], runId, 'queued', 'running', created)
        if fields[10] then redis.call('ZREM', KEYS[6], runId) end
        local queued = tonumber(fields[8] or '0')
        if queued > 0 and redis.call('DECRBY', KEYS[5], queued) < 0 then redis.call('SET', KEYS[5], 0) end
        return { runId, fields[2], fields[1], fields[3] or '', fields[4] or '', left == 0 and 1 or 0, seen, next, record, fields[5] or false, fields[6] or false, fields[7] or false }
      end
    end
  end
  if #page < 2 * PAGE and removed == 0 then break end
end
if empty or (skipped == 0 and redis.call('EXISTS', KEYS[1]) == 0) then
  redis.call('DEL', KEYS[2], KEYS[3])
  return { seen }
end
if firstCapped then return { -1, firstCapped } end
return 0
`
export const TAKE = new LuaScript(TAKE_LUA)

/**
 * A run taken over from a lost sidecar (the reaper's, or a take whose answer was lost) starts:
 * compare-and-set of its record (queued → running, owned by the taker), and its request, body and
 * webhook read in the same step ({0} when the record had changed: a cancel, a takeover). It leaves
 * the queue's bytes (its `queued_bytes` becomes 0, in the record's HSET) and the due set; its
 * request and body stay until it ends (TRANSITION drops them then), so that a start tried again
 * after its reply was lost finds them. It moves from the app's queued index to its running one
 * (redis-run-index.ts). (A run TAKE hands out is started by TAKE.)
 * KEYS: run, queued bytes, due set, index. ARGV: old record, new record, owner, run id.
 */
export const START_READ = new LuaScript(`${INDEX_RUN_LUA}
local fields = redis.call('HMGET', KEYS[1], 'record', 'request', 'body', 'webhook', 'queued_bytes')
if fields[1] ~= ARGV[1] then return {0} end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'owner', ARGV[3], 'queued_bytes', 0)
reindexRun(KEYS[4], ARGV[4], 'queued', 'running')
redis.call('ZREM', KEYS[3], ARGV[4])
local queued = tonumber(fields[5] or '0')
if queued > 0 and redis.call('DECRBY', KEYS[2], queued) < 0 then redis.call('SET', KEYS[2], 0) end
return {1, fields[2], fields[3], fields[4]}
`)

/**
 * Gives a taken run back (a stop, a slot a call took meanwhile): its entry is acknowledged and
 * deleted and, for a run still queued, a new one added, and the run takes back the turn it had (one
 * queued by a sidecar of a version before turns gets one), with a wake-up. A run TAKE started
 * (`started`: its record as started, still the same) goes back to queued first (`queued`: its
 * record as queued): its owner, index, due set time and queued bytes as before the take.
 * KEYS: run, queue, turns, fair, wake, queued bytes, due set, index.
 * ARGV: entry, run id, record as started ('' taken unstarted), record as queued.
 */
export const RELEASE = new LuaScript(`${TURN_LUA}${STARTED_LUA}
redis.call('XACK', KEYS[2], '${GROUP}', ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
local fields = redis.call('HMGET', KEYS[1], 'record', 'turn', 'turn_at', 'urgency', 'caller', 'at', 'expires')
if ARGV[3] ~= '' and fields[1] == ARGV[3] then
  local bytes = redis.call('HSTRLEN', KEYS[1], 'body')
  redis.call('HSET', KEYS[1], 'record', ARGV[4], 'queued_bytes', bytes)
  moveIndex(KEYS[8], ARGV[2], 'running', 'queued', fields[6] or redis.call('ZSCORE', KEYS[8] .. ':running', ARGV[2]) or 0)
  if fields[7] then redis.call('ZADD', KEYS[7], fields[7], ARGV[2]) end
  if bytes > 0 then redis.call('INCRBY', KEYS[6], bytes) end
  fields[1] = ARGV[4]
end
if not fields[1] or not string.find(fields[1], '"status":"queued"', 1, true) then return 0 end
local id = redis.call('XADD', KEYS[2], '*', 'run', ARGV[2], 'turn', '1')
if fields[2] then
  redis.call('ZADD', KEYS[3], fields[3], fields[2])
else
  local turn, at = queueTurn(KEYS[3], KEYS[4], tonumber(fields[4] or '3'), fields[5] or '', id, ARGV[2])
  redis.call('HSET', KEYS[1], 'turn', turn, 'turn_at', at)
end
redis.call('HSET', KEYS[1], 'entry', id)
redis.call('HDEL', KEYS[1], 'owner')
redis.call('RPUSH', KEYS[5], tonumber(fields[4] or '3'))
return 1
`)

/** The app's runs in the turn order (queued, not taken) by urgency, 0 to 7. KEYS: turns. */
export const TURNS_BY_URGENCY = new LuaScript(`${TURN_LUA}
local counts = {}
for urgency = 0, 7 do counts[urgency + 1] = redis.call('ZCOUNT', KEYS[1], urgency * TURN_SPAN, '(' .. ((urgency + 1) * TURN_SPAN)) end
return counts
`)

/** The app's async runs taken and not ended: its queue's entries less its turns. KEYS: queue, turns. */
export const RUNNING = new LuaScript(`
return redis.call('XLEN', KEYS[1]) - redis.call('ZCARD', KEYS[2])
`)

/** Every script above: loaded as a connection becomes ready. */
export const QUEUE_SCRIPTS: readonly LuaScript[] = [SUBMIT, TAKE, START_READ, RELEASE, TURNS_BY_URGENCY, RUNNING]
