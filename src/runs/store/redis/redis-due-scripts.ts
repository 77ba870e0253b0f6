import { luaSource } from './redis-lua-file.ts'
import { LuaScript } from './redis-lua-script.ts'

// The scripts of the app's due set (redis-due.ts): leases, looks, left deliveries, lost claims.

/** Lua, prepended to a script: `now`, Redis's clock in ms (lua/now.lua). */
export const NOW_LUA = luaSource('now.lua')

/**
 * The app's sync runs' claims whose sidecar is lost (no heartbeat for `lost after` ms by Redis's
 * clock), at most 16: {slot, run id}…; a claim whose slot is gone (expired) leaves the set.
 * KEYS: claims. ARGV: lost after ms.
 */
export const LOST_CLAIMS = new LuaScript(`${NOW_LUA}
local out = {}
for _, slot in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[1])), 'LIMIT', 0, 16)) do
  local runId = redis.call('HGET', slot, 'run')
  if runId then
    out[#out + 1] = slot
    out[#out + 1] = runId
  else
    redis.call('ZREM', KEYS[1], slot)
  end
end
return out
`)

/**
 * A holding sidecar's lease in the app's due set (redis-due.ts): due RUN_LOST_AFTER_SECONDS after
 * now, by Redis's clock (the one XAUTOCLAIM's idle times and the claims set use: a sidecar's own
 * clock may be off). Written after the beat's refreshes, so when it falls due what it held is idle
 * that long. KEYS: due set. ARGV: member, lost after ms.
 */
export const LEASE_BEAT = new LuaScript(`${NOW_LUA}
return redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
`)

/**
 * A delivery left for another sidecar: its entry made idle as long as a lost sidecar's (XCLAIM …
 * IDLE), and due in the app's due set at once, in one step sent behind this sidecar's earlier
 * refreshes (a heartbeat's refresh sent before it cannot make it less idle after).
 * KEYS: deliveries stream, due set. ARGV: group, consumer, entry, idle ms, member.
 */
export const LEAVE_DELIVERY = new LuaScript(`
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
return redis.call('ZADD', KEYS[2], 0, ARGV[5])
`)

/**
 * What is due in the app's due set by Redis's clock: {now, the member after them ('' none), its
 * score ('' none), members due…} (at most `count`). KEYS: due set. ARGV: count.
 */
export const LOOK_DUE = new LuaScript(`${NOW_LUA}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
local after = redis.call('ZRANGE', KEYS[1], #due, #due, 'WITHSCORES')
local out = { now, after[1] or '', after[2] or '' }
for _, member in ipairs(due) do out[#out + 1] = member end
return out
`)
