-- now.lua, included: `now`, Redis's clock in ms (every sidecar's claims are timed by the same clock).
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
