import { INDEX_RUN_LUA } from './redis-run-index.ts'
import { LuaScript } from './redis-lua-script.ts'

/** The consumer group every sidecar holds an app's taken runs in (the reaper takes a lost sidecar's over). */
export const GROUP = 'runners'

/**
 * Scores of an app's turn order (`…:turns`, a sorted set of its queued runs): urgency × TURN_SPAN
 * plus the run's start tag, so that every run of urgency u comes before any of urgency u + 1.
 * Within one urgency, start-time fair queuing across callers: a caller's next run starts at the
 * later of the urgency's virtual time (the start tag of its run taken last, `…:clock` field
 * `v<u>`) and the caller's finish tag (its last run's start + 1, `…:fair`, member `<u> <caller>`),
 * so a caller with 1,000 runs queued has them at tags t, t + 1, …, and another caller's one run
 * comes at the virtual time: next but one. Runs of equal score are taken as they came (the member
 * is the submission's stream id, zero-padded, the run id, a space and the caller), each caller's own in order. Tags of callers
 * whose finish tag the virtual time has passed are dropped as runs are taken; the whole state goes
 * when a take finds the queue empty, so the tags stay small.
 * Lua, prepended to a script: queueTurn(turns, fair, clock, urgency, caller, sortable id, run id)
 * → member, score (the caller puts them in the run's hash: `turn`, `turn_at`, for RELEASE and cancels).
 */
const TURN_LUA = `
local TURN_SPAN = ${2 ** 40}
local function queueTurn (turns, fair, clock, urgency, caller, id, runId)
  local base = urgency * TURN_SPAN
  local start = tonumber(redis.call('HGET', clock, 'v' .. urgency) or '0')
  local tag = urgency .. ' ' .. caller
  local finished = redis.call('ZSCORE', fair, tag)
  if finished and tonumber(finished) - base > start then start = tonumber(finished) - base end
  redis.call('ZADD', fair, base + start + 1, tag)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  local member = string.rep('0', 15 - #ms) .. ms .. string.rep('0', 8 - #seq) .. seq .. runId .. ' ' .. caller
  redis.call('ZADD', turns, base + start, member)
  return member, base + start
end
`

/**
 * Records a queued run and queues it, unless the id is taken (-1), ASYNC_QUEUE_DEPTH runs already
 * wait (-2: waiting = entries in the stream minus the runs started) or their bodies would pass
 * ASYNC_QUEUE_MAX_BYTES (-3). The body's bytes are counted in the app's queued-bytes until the run
 * leaves the queue (START_READ, or TRANSITION for a cancel); with no entry left in the queue,
 * nothing is counted (the count starts again from this body).
 * The stream entry names the run and says it has a turn: it is what a taker holds (its pending
 * list, the reaper, fencing).
 * The run takes its turn (TURN_LUA: by urgency, fair across callers) and a wake-up goes in the
 * app's wake list, its urgency (a taker blocked on it takes the next run, and knows how urgent the
 * queue's first run is at least, as it competes with waiting calls). Its time limit (the sooner of
 * `Cancel-After` and ASYNC_QUEUE_TTL_SECONDS) goes in the app's expiry set, which it leaves as it
 * starts or ends (START_READ, TRANSITION); the run joins the app's index (redis-run-index.ts).
 * Its `Priority` urgency and caller, when given, go in the record's hash (TAKE hands them to the
 * taker's gate and CALLER_MAX_INFLIGHT); without, its turn is urgency 3's, caller ''.
 * KEYS: run, queue, queued bytes, running (the set of the app's async runs started and not ended),
 * expiry, index, turns, fair, clock, wake.
 * ARGV: record, request, body, webhook ('' none), depth, run id, max bytes, expiry (epoch ms), created_at ms, urgency ('' none), caller.
 */
export const SUBMIT = new LuaScript(`${INDEX_RUN_LUA}${TURN_LUA}
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local entries = redis.call('XLEN', KEYS[2])
local waiting = entries - redis.call('SCARD', KEYS[4])
if waiting >= tonumber(ARGV[5]) then return -2 end
local bytes = string.len(ARGV[3])
if bytes > tonumber(ARGV[7]) then return -3 end
if entries == 0 then
  redis.call('SET', KEYS[3], bytes)
elseif bytes > 0 and redis.call('INCRBY', KEYS[3], bytes) > tonumber(ARGV[7]) then
  redis.call('DECRBY', KEYS[3], bytes)
  return -3
end
local id = redis.call('XADD', KEYS[2], '*', 'run', ARGV[6], 'turn', '1')
local turn, at = queueTurn(KEYS[7], KEYS[8], KEYS[9], tonumber(ARGV[10]) or 3, ARGV[11], id, ARGV[6])
local fields = { 'record', ARGV[1], 'request', ARGV[2], 'body', ARGV[3], 'async', '1', 'entry', id, 'queued_bytes', bytes, 'turn', turn, 'turn_at', at }
if ARGV[4] ~= '' then fields[#fields + 1] = 'webhook'; fields[#fields + 1] = ARGV[4] end
if ARGV[10] ~= '' then fields[#fields + 1] = 'urgency'; fields[#fields + 1] = ARGV[10]; fields[#fields + 1] = 'caller'; fields[#fields + 1] = ARGV[11] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('RPUSH', KEYS[10], tonumber(ARGV[10]) or 3)
redis.call('ZADD', KEYS[5], ARGV[8], ARGV[6])
indexRun(KEYS[6], ARGV[6], 'queued', ARGV[9])
return 1
`)

/**
 * Takes the app's next queued run for a sidecar with a free slot: the first of the turn order
 * whose run is still queued and whose caller is not capped at the taker (CALLER_MAX_INFLIGHT:
 * `capped`, its callers one per line; their runs keep their place, for replicas that can start
 * them), put in the taker's pending list (XCLAIM FORCE), so that its lease, heartbeat, takeover by
 * the reaper and fencing work on it. A turn whose run is gone (canceled, ended) is dropped as it is
 * passed over. The urgency's virtual time moves to the run's start tag; finish tags it passed go.
 * The wake list is cut to the turns left (a waiting sidecar's BLPOP uses one up, a take without
 * waiting none), so it holds no more wake-ups than runs queued. The order's state stays while runs
 * are taken one after another (a caller's runs taken still count against its next), and goes when
 * a take finds none queued.
 * Runs queued by a sidecar of the version before turns (a rolling upgrade) have none: with `look`
 * (a page size; '0' none), once the turn order is empty, the entries nobody has read with `>` yet
 * are read (NOACK: nobody's pending list changes), and those runs get a turn, in the order they
 * came; this version's entries (`turn` 1) are passed over.
 * Returns {run id, entry, record as queued, urgency ('' none), caller, turns left, entries looked at,
 * the urgency of the next turn ('' none)}; {entries looked at} when none is queued (the order's
 * state and the wake list go: the next run starts them again); {-1, urgency of the first} when
 * every run left is a capped caller's; 0 after looking at PAGES × PAGE turns, none to take (ask again).
 * KEYS: turns, fair, clock, wake, queue. ARGV: taker (its consumer name), run key prefix, look
 * (entries to read at most; '0' none), capped callers (one per line; '' none).
 */
export const TAKE = new LuaScript(`${TURN_LUA}
local PAGE, PAGES = 32, 32
local seen = 0
-- a command on the queue's group, the group made first if it is missing (the stream deleted by hand, a server restarted empty)
local function inGroup (...)
  local ok, reply = pcall(redis.call, ...)
  if ok then return reply end
  redis.call('XGROUP', 'CREATE', KEYS[5], '${GROUP}', '0', 'MKSTREAM')
  return redis.call(...)
end
local function adoptUnread ()
  if ARGV[3] == '0' then return 0 end
  local read = inGroup('XREADGROUP', 'GROUP', '${GROUP}', ARGV[1], 'COUNT', ARGV[3], 'NOACK', 'STREAMS', KEYS[5], '>')
  if not read then return 0 end
  for _, entry in ipairs(read[1][2]) do
    local runId = entry[2][2]
    local fields = {}
    if entry[2][3] ~= 'turn' then fields = redis.call('HMGET', ARGV[2] .. runId, 'record', 'turn', 'entry', 'urgency', 'caller') end
    if fields[1] and not fields[2] and fields[3] == entry[1] and string.find(fields[1], '"status":"queued"', 1, true) then
      local turn, at = queueTurn(KEYS[1], KEYS[2], KEYS[3], tonumber(fields[4] or '3'), fields[5] or '', entry[1], runId)
      redis.call('HSET', ARGV[2] .. runId, 'turn', turn, 'turn_at', at)
      redis.call('RPUSH', KEYS[4], tonumber(fields[4] or '3'))
    end
  end
  seen = seen + #read[1][2]
  return #read[1][2]
end
local capped = {}
for caller in string.gmatch(ARGV[4], '[^\\n]+') do capped[caller] = true end
if redis.call('EXISTS', KEYS[1]) == 0 and adoptUnread() == 0 then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
  return { seen }
end
local skipped, firstCapped = 0, nil
for _ = 1, PAGES do
  local page = redis.call('ZRANGE', KEYS[1], skipped, skipped + PAGE - 1, 'WITHSCORES')
  if #page == 0 then break end
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
      local fields = redis.call('HMGET', ARGV[2] .. runId, 'record', 'entry', 'urgency', 'caller')
      redis.call('ZREM', KEYS[1], member)
      if fields[1] and fields[2] and string.find(fields[1], '"status":"queued"', 1, true)
        and #inGroup('XCLAIM', KEYS[5], '${GROUP}', ARGV[1], 0, fields[2], 'FORCE', 'JUSTID') == 1 then
        redis.call('HSET', KEYS[3], 'v' .. urgency, score - urgency * TURN_SPAN)
        redis.call('ZREMRANGEBYSCORE', KEYS[2], urgency * TURN_SPAN, score)
        local left = redis.call('ZCARD', KEYS[1])
        if left == 0 and adoptUnread() > 0 then left = redis.call('ZCARD', KEYS[1]) end
        local next = ''
        if left == 0 then
          redis.call('DEL', KEYS[4])
        else
          redis.call('LTRIM', KEYS[4], 0, left - 1)
          next = math.floor(tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) / TURN_SPAN)
        end
        return { runId, fields[2], fields[1], fields[3] or '', fields[4] or '', left, seen, next }
      end
    end
  end
end
if firstCapped then return { -1, firstCapped } end
return 0
`)

/**
 * A taken run starts: compare-and-set of its record (queued → running, owned
 * by the taker), and its request, body and webhook read in the same step ({0} when the record had
 * changed: a cancel, a takeover). It leaves the queue's bytes (its `queued_bytes` becomes 0, in the
 * record's HSET), joins the running set and leaves the expiry set; its
 * request and body stay until it ends (TRANSITION drops them then), so that a start tried again
 * after its reply was lost finds them.
 * It moves from the app's queued index to its running one (redis-run-index.ts).
 * KEYS: run, queued bytes, running, expiry, index. ARGV: old record, new record, owner, run id.
 */
export const START_READ = new LuaScript(`${INDEX_RUN_LUA}
local fields = redis.call('HMGET', KEYS[1], 'record', 'request', 'body', 'webhook', 'queued_bytes')
if fields[1] ~= ARGV[1] then return {0} end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'owner', ARGV[3], 'queued_bytes', 0)
reindexRun(KEYS[5], ARGV[4], 'queued', 'running')
redis.call('SADD', KEYS[3], KEYS[1])
redis.call('ZREM', KEYS[4], ARGV[4])
local queued = tonumber(fields[5] or '0')
if queued > 0 and redis.call('DECRBY', KEYS[2], queued) < 0 then redis.call('SET', KEYS[2], 0) end
return {1, fields[2], fields[3], fields[4]}
`)

/**
 * Gives a taken run back (a stop, a take abandoned): its entry is acknowledged and deleted and,
 * for a run still queued, a new one added, and the run takes back the turn it had (one queued by
 * a sidecar of a version before turns gets one), with a wake-up. KEYS: run, queue, turns, fair,
 * clock, wake. ARGV: entry, run id.
 */
export const RELEASE = new LuaScript(`${TURN_LUA}
redis.call('XACK', KEYS[2], '${GROUP}', ARGV[1])
redis.call('XDEL', KEYS[2], ARGV[1])
local fields = redis.call('HMGET', KEYS[1], 'record', 'turn', 'turn_at', 'urgency', 'caller')
if not fields[1] or not string.find(fields[1], '"status":"queued"', 1, true) then return 0 end
local id = redis.call('XADD', KEYS[2], '*', 'run', ARGV[2], 'turn', '1')
if fields[2] then
  redis.call('ZADD', KEYS[3], fields[3], fields[2])
else
  local turn, at = queueTurn(KEYS[3], KEYS[4], KEYS[5], tonumber(fields[4] or '3'), fields[5] or '', id, ARGV[2])
  redis.call('HSET', KEYS[1], 'turn', turn, 'turn_at', at)
end
redis.call('HSET', KEYS[1], 'entry', id)
redis.call('HDEL', KEYS[1], 'owner')
redis.call('RPUSH', KEYS[6], tonumber(fields[4] or '3'))
return 1
`)

/** Runs waiting in the app's queue: its entries less its runs started (a run taken ahead still waits). KEYS: queue, running. */
export const WAITING = new LuaScript(`
return redis.call('XLEN', KEYS[1]) - redis.call('SCARD', KEYS[2])
`)

/** The app's runs in the turn order (queued, not taken) by urgency, 0 to 7. KEYS: turns. */
export const TURNS_BY_URGENCY = new LuaScript(`${TURN_LUA}
local counts = {}
for urgency = 0, 7 do counts[urgency + 1] = redis.call('ZCOUNT', KEYS[1], urgency * TURN_SPAN, '(' .. ((urgency + 1) * TURN_SPAN)) end
return counts
`)

/** Every script above: loaded as a connection becomes ready. */
export const QUEUE_SCRIPTS: readonly LuaScript[] = [SUBMIT, TAKE, START_READ, RELEASE, WAITING, TURNS_BY_URGENCY]
