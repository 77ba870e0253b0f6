-- END_AND_TAKE: a run's end and the take of the next run for the slot it leaves, in one step.
-- KEYS: transition keys..., take keys...
-- ARGV: transition args..., take args...
-- Returns: {1, TAKE's reply} ended (the reply as take.lua gives it); {0} the record had changed (nothing written, nothing taken)
--
-- transition keys, args: TRANSITION's eight KEYS and ten ARGV (transition.lua); take keys, args:
-- TAKE's seven and seven (take.lua). Its definition puts both before this file as functions,
-- transition(KEYS, ARGV) and take(KEYS, ARGV). The take runs only when the end changed the
-- record: no round trip between a run's end and the next run's start.
if transition({ unpack(KEYS, 1, 8) }, { unpack(ARGV, 1, 10) }) ~= 1 then return { 0 } end
return { 1, take({ unpack(KEYS, 9, 15) }, { unpack(ARGV, 11, 17) }) }
