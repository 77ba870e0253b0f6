-- END_AND_HOLD: a run's end and its webhook's delivery written down, in one step.
-- KEYS: transition keys..., hold keys...
-- ARGV: transition args..., hold args...
-- Returns: HOLD_DELIVERY's entry id; false the record had changed (nothing written)
--
-- transition keys, args: TRANSITION's eight KEYS and ten ARGV (transition.lua); hold keys, args:
-- HOLD_DELIVERY's two and nine (hold-delivery.lua). Its definition puts both before this file as
-- functions, transition(KEYS, ARGV) and hold(KEYS, ARGV). The delivery is written only when the
-- end changed the record: a sidecar that dies right after the end leaves the delivery to another,
-- never a finished run with no delivery.
if transition({ unpack(KEYS, 1, 8) }, { unpack(ARGV, 1, 10) }) ~= 1 then return false end
return hold({ KEYS[9], KEYS[10] }, { unpack(ARGV, 11, 19) })
