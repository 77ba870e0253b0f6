import t from 'tap'
import { startedRecord } from '../../../../src/runs/run-record.ts'
import type { RunRecord } from '../../../../src/runs/run-data.ts'
import { GROUP, RELEASE, RUNNING, START_READ, TAKE, TURNS_BY_URGENCY } from '../../../../src/runs/store/redis/redis-queue-scripts.ts'
import { luaSource } from '../../../../src/runs/store/redis/redis-lua-file.ts'
import { pendingOf, redisNow, scriptRedis, streamOf, zsetOf } from '../../../helpers/redis-state.ts'
import { CREATED, K, memberOf, queueCalls, REQUEST, runKey, SPAN, STARTED_AT } from './queue-state.ts'

// The queue's scripts on hand-made key states: a run submitted (its hash, turn, fair tags, wake-up,
// indexes and bytes), taken in the turn order (urgency, then round robin across callers, capped
// callers passed over, stale turns dropped) and started in the same step, given back exactly as it
// was, and a take refused whole by a Redis out of memory.

const run = runKey
const queuedOf = (id: string): RunRecord => ({ run_id: id, status: 'queued', created_at: new Date(CREATED).toISOString() })

t.test('the queue scripts', async t => {
  const redis = await scriptRedis(t)

  const { submit, take, takeId, entryOf } = queueCalls(redis, queuedOf)

  t.test('SUBMIT records the run queued, its turn, its wake-up and its index; no due set without an expiry', async t => {
    t.equal(await submit('r1'), 'queued')
    const [[entry = '', fields = {}] = []] = await streamOf(redis, K.queue)
    t.same(fields, { run: 'r1', turn: '1' }, 'its entry names it and says it has a turn')
    const turn = memberOf(entry, 'r1')
    t.same(await redis.hgetall(run('r1')), {
      record: JSON.stringify(queuedOf('r1')), request: REQUEST, body: 'hello', async: '1', entry, queued_bytes: '5', turn, turn_at: String(3 * SPAN), at: String(CREATED), sub: ''
    }, 'no expires, webhook, urgency or caller when none is given; its sub as given (\'\': auth off)')
    t.same(await zsetOf(redis, K.turns), [[turn, 3 * SPAN]], 'urgency 3\'s turn, at the virtual time (0)')
    t.same(await zsetOf(redis, K.fair), [['3 ', 3 * SPAN + 1]], 'caller \'\'\'s finish tag: its start + 1')
    t.same(await redis.lrange(K.wake, 0, -1), ['3'], 'a wake-up naming its urgency')
    t.equal(await redis.get(K.queuedBytes), '5')
    t.same(await zsetOf(redis, `${K.index}:queued`), [['r1', CREATED]])
    t.equal(await redis.exists(K.dueSet), 0)
  })

  t.test('SUBMIT with an expiry, a webhook, an urgency and a caller; callers take turns by their finish tags', async t => {
    t.equal(await submit('a1', { expiry: 9_000, webhook: '{"url":"https://hook.example"}', urgency: 1, caller: 'alice', sub: 'alice-sub' }), 'queued')
    const a1 = await entryOf('a1')
    t.same(await redis.hgetall(run('a1')), {
      record: JSON.stringify(queuedOf('a1')), request: REQUEST, body: 'hello', async: '1', entry: a1, queued_bytes: '5',
      turn: memberOf(a1, 'a1', 'alice'), turn_at: String(SPAN), at: String(CREATED), sub: 'alice-sub',
      expires: '9000', webhook: '{"url":"https://hook.example"}', urgency: '1', caller: 'alice'
    })
    t.same(await zsetOf(redis, K.dueSet), [['a1', 9_000]], 'in the due set at its expiry')
    t.equal(await submit('a2', { urgency: 1, caller: 'alice' }), 'queued')
    t.equal(await submit('b1', { urgency: 1, caller: 'bob' }), 'queued')
    t.same(await zsetOf(redis, K.turns), [
      [memberOf(a1, 'a1', 'alice'), SPAN], [memberOf(await entryOf('b1'), 'b1', 'bob'), SPAN], [memberOf(await entryOf('a2'), 'a2', 'alice'), SPAN + 1]
    ], 'bob\'s first run before alice\'s second')
    t.same(await zsetOf(redis, K.fair), [['1 bob', SPAN + 1], ['1 alice', SPAN + 2]])
    t.same(await redis.lrange(K.wake, 0, -1), ['1', '1', '1'])
    t.same(await zsetOf(redis, K.dueSet), [['a1', 9_000]], 'only the run with an expiry')
  })

  t.test('SUBMIT refuses a run id taken (-1), and writes nothing', async t => {
    await redis.hset(run('r1'), 'record', '{"run_id":"r1","status":"succeeded"}')
    t.equal(await submit('r1'), 'run id taken')
    t.equal(await redis.exists(K.queue, K.turns, K.fair, K.wake, K.queuedBytes, `${K.index}:queued`), 0)
  })

  t.test('SUBMIT refuses a run past ASYNC_QUEUE_DEPTH (-2): the runs waiting are the turns, not the entries', async t => {
    t.equal(await submit('r1', { depth: 2 }), 'queued')
    t.equal(await submit('r2', { depth: 2 }), 'queued')
    t.equal(await submit('r3', { depth: 2 }), 'queue full')
    t.equal(await redis.exists(run('r3')), 0)
    t.equal(await redis.xlen(K.queue), 2)
    t.equal(await takeId(), 'r1')
    t.equal(await submit('r3', { depth: 2 }), 'queued', 'a run taken leaves the count (its entry stays)')
    t.equal(await redis.xlen(K.queue), 3)
  })

  t.test('SUBMIT refuses a body past ASYNC_QUEUE_MAX_BYTES (-3); with no turn left the count starts again', async t => {
    t.equal(await submit('r0', { body: 'x'.repeat(11), maxBytes: 10 }), 'bytes full', 'one body alone too big')
    t.equal(await redis.exists(K.queuedBytes, run('r0')), 0)
    t.equal(await submit('r1', { body: 'x'.repeat(6), maxBytes: 10 }), 'queued')
    t.equal(await submit('r2', { body: 'x'.repeat(5), maxBytes: 10 }), 'bytes full')
    t.equal(await redis.get(K.queuedBytes), '6', 'its bytes taken back')
    t.equal(await redis.exists(run('r2')), 0)
    t.equal(await submit('r3', { body: 'x'.repeat(4), maxBytes: 10 }), 'queued')
    t.equal(await redis.get(K.queuedBytes), '10')
    await redis.del(K.turns)
    t.equal(await submit('r4', { body: 'x'.repeat(7), maxBytes: 10 }), 'queued', 'no turn left: the count left behind is not counted')
    t.equal(await redis.get(K.queuedBytes), '7')
  })

  t.test('TAKE: by urgency, then round robin across callers, each caller\'s own in order', async t => {
    for (const id of ['a1', 'a2', 'a3']) await submit(id, { caller: 'alice' })
    for (const id of ['b1', 'b2']) await submit(id, { caller: 'bob' })
    await submit('u1', { urgency: 1, caller: 'carol' })
    const order: Array<[string, number | undefined, boolean]> = []
    for (let i = 0; i < 6; i++) {
      const taken = await take()
      if (taken.kind === 'taken') order.push([taken.run.runId, taken.next, taken.drained])
    }
    t.same(order, [
      ['u1', 3, false], ['a1', 3, false], ['b1', 3, false], ['a2', 3, false], ['b2', 3, false], ['a3', undefined, true]
    ], 'each with the next turn\'s urgency, drained at the last')
    t.same(await zsetOf(redis, K.fair), [['v1', SPAN], ['1 carol', SPAN + 1], ['3 bob', 3 * SPAN + 2], ['v3', 3 * SPAN + 2], ['3 alice', 3 * SPAN + 3]],
      'each urgency\'s virtual time at its last run\'s tag, the callers\' finish tags kept')
    t.same(await take(), { kind: 'none', seen: 0 })
    t.equal(await redis.exists(K.fair, K.wake), 0, 'none queued: the order\'s state and the wake list go')
  })

  t.test('TAKE passes a capped caller\'s runs over, in their place; only capped runs left: {-1, urgency}', async t => {
    await submit('a1', { urgency: 2, caller: 'alice' })
    await submit('b1', { urgency: 3, caller: 'bob' })
    const taken = await take({ cappedCallers: 'alice' })
    t.match(taken, { kind: 'taken', run: { runId: 'b1', urgency: '3', caller: 'bob' }, next: 2 }, 'the next turn: the capped run\'s urgency')
    await redis.del(K.wake) // as this taker's BLPOP leaves it
    t.same(await take({ cappedCallers: 'carol\nalice' }), { kind: 'capped', urgency: 2 })
    t.same(await redis.lrange(K.wake, 0, -1), ['2'], 'a wake-up left for a replica that can take it')
    t.same(await take({ cappedCallers: 'alice' }), { kind: 'capped', urgency: 2 })
    t.same(await redis.lrange(K.wake, 0, -1), ['2'], 'one, not one per take')
    t.same((await zsetOf(redis, K.turns)).map(([member]) => member), [memberOf(await entryOf('a1'), 'a1', 'alice')], 'its turn kept')
    t.equal(await redis.hget(run('a1'), 'record'), JSON.stringify(queuedOf('a1')))
    t.equal(await takeId(), 'a1', 'taken once alice is no longer capped')
  })

  t.test('TAKE drops a stale turn (its run canceled, or gone) as it passes it over', async t => {
    await submit('r1')
    await submit('r2')
    await submit('r3')
    await redis.hset(run('r1'), 'record', JSON.stringify({ ...queuedOf('r1'), status: 'canceled' }))
    await redis.del(run('r2'))
    t.equal(await takeId(), 'r3')
    t.same(await zsetOf(redis, K.turns), [], 'the stale turns gone with it')
    await submit('r4')
    await redis.del(run('r4'))
    t.same(await take(), { kind: 'none', seen: 0 }, 'only a stale turn: none taken')
    t.same(await zsetOf(redis, K.turns), [])
  })

  t.test('TAKE starts the run: record, owner, pending entry, indexes, queued bytes and due set', async t => {
    await submit('r1', { expiry: 9_000, webhook: '{"url":"https://hook.example"}' })
    await submit('r2', { body: 'abc' })
    await redis.zadd(K.dueSet, 7_000, 'r2') // a member of its name, but no `expires` of its own: not the take's
    const entry = await entryOf('r1')
    const turn = memberOf(entry, 'r1')
    const started = '{"run_id":"r1","status":"running","created_at":"1970-01-01T00:00:01.000Z","started_at":"1970-01-01T00:00:05.000Z","queue_time_ms":4000}'
    t.equal(started, JSON.stringify(startedRecord(queuedOf('r1'), CREATED, STARTED_AT)), 'the bytes run-record.ts makes')
    t.same(await take(), {
      kind: 'taken',
      run: {
        runId: 'r1', entry, queued: JSON.stringify(queuedOf('r1')), urgency: '', caller: '',
        started: { record: started, request: Buffer.from(REQUEST), body: Buffer.from('hello'), webhook: Buffer.from('{"url":"https://hook.example"}') }
      },
      drained: false,
      seen: 0,
      next: 3
    })
    t.same(await redis.hgetall(run('r1')), {
      record: started, request: REQUEST, body: 'hello', async: '1', entry, queued_bytes: '0', turn, turn_at: String(3 * SPAN), at: String(CREATED),
      expires: '9000', webhook: '{"url":"https://hook.example"}', owner: 'sidecar-a', sub: ''
    }, 'its record started (queue_time_ms: started at less created at), owned by the taker')
    t.same(await pendingOf(redis, K.queue, GROUP), [[entry, 'sidecar-a', 1]], 'its entry in the taker\'s pending list (the group made)')
    t.same(await zsetOf(redis, `${K.index}:queued`), [['r2', CREATED]])
    t.same(await zsetOf(redis, `${K.index}:running`), [['r1', CREATED]])
    t.equal(await redis.get(K.queuedBytes), '3', 'its bytes given back')
    t.same(await zsetOf(redis, K.dueSet), [['r2', 7_000]], 'it left the due set')
    t.same(await redis.lrange(K.wake, 0, -1), ['3'], 'the wake list cut to the turns left')
    t.match(await take(), { kind: 'taken', run: { runId: 'r2', started: { webhook: null } }, drained: true, next: undefined })
    t.same(await zsetOf(redis, K.dueSet), [['r2', 7_000]], 'a run without `expires` leaves the due set alone')
  })

  t.test('TAKE: a short page cuts the wake list to the turns left; drained, the list goes unless woken', async t => {
    await submit('r1')
    await submit('r2')
    await submit('r3')
    await redis.rpush(K.wake, '3', '3') // wake-ups of runs taken since (a lost one, one a take without waiting left)
    t.equal(await takeId(), 'r1')
    t.same(await redis.lrange(K.wake, 0, -1), ['3', '3'], 'two turns left: two wake-ups')
    t.equal(await takeId({ woken: '1' }), 'r2')
    t.same(await redis.lrange(K.wake, 0, -1), ['3'])
    await redis.rpush(K.wake, '3')
    t.match(await take({ woken: '1' }), { kind: 'taken', run: { runId: 'r3' }, drained: true })
    t.same(await redis.lrange(K.wake, 0, -1), ['3', '3'], 'behind a wake-up the list is left as it is')
    await submit('r4')
    t.match(await take(), { kind: 'taken', run: { runId: 'r4' }, drained: true })
    t.equal(await redis.exists(K.wake), 0, 'drained, not woken: the list goes')
  })

  t.test('TAKE behind a BLPOP (woken) runs as the wait ends: it starts the run at Redis\'s time, not the time it was sent', async t => {
    await submit('r1', { createdAtMs: Date.now() })
    const before = await redisNow(redis)
    const taken = await take({ woken: '1' }) // sent with STARTED_AT, long before
    const after = await redisNow(redis)
    if (taken.kind !== 'taken' || taken.run.started === undefined) throw new Error('not taken')
    const record = JSON.parse(taken.run.started.record) as RunRecord
    const startedAt = Date.parse(record.started_at as string)
    t.ok(startedAt >= before && startedAt <= after, `started at ${record.started_at}, Redis's time`)
    t.ok((record.queue_time_ms ?? -1) >= 0, `queue_time_ms ${record.queue_time_ms} from its created_at`)
  })

  t.test('isoTime (started.lua) writes epoch ms as toISOString does, leap days and centuries included', async t => {
    const times = [0, 1, 999, 86_399_999, 951_782_400_000, 951_868_799_999, 1_709_164_800_123, 4_107_542_399_999, 4_102_444_800_000, Date.now()]
    const written = await redis.eval(`${luaSource('started.lua')}\nlocal out = {}\nfor i = 1, #ARGV do out[i] = isoTime(tonumber(ARGV[i])) end\nreturn out`, 0, ...times) as string[]
    t.same(written, times.map(ms => new Date(ms).toISOString()))
  })

  t.test('TAKE reads a first page of 8 turns, then pages of 32: past it the wake list stays, capped runs are passed over', async t => {
    for (let i = 1; i <= 9; i++) await submit(`a${i}`, { urgency: 3, caller: 'alice' })
    await submit('b1', { urgency: 4, caller: 'bob' })
    t.equal(await takeId(), 'a1')
    t.same(await redis.lrange(K.wake, 0, -1), [...Array<string>(9).fill('3'), '4'], 'nine turns left, more than the first page: the list is not cut')
    const taken = await take({ cappedCallers: 'alice' })
    t.match(taken, { kind: 'taken', run: { runId: 'b1', caller: 'bob' }, next: 3 }, 'bob\'s less urgent run found past the first page, alice\'s capped ones')
    t.same((await zsetOf(redis, K.turns)).map(([member]) => member.split(' ')[1]), Array<string>(8).fill('alice'), 'alice\'s eight left in their place')
  })

  t.test('TAKE on a Redis out of memory is refused before any write: the turn stays', async t => {
    await submit('r1')
    await Promise.all(TAKE.scripts.map(async script => { await script.load(redis) }))
    const before = {
      run: await redis.hgetall(run('r1')), turns: await zsetOf(redis, K.turns), fair: await zsetOf(redis, K.fair),
      wake: await redis.lrange(K.wake, 0, -1), bytes: await redis.get(K.queuedBytes), queued: await zsetOf(redis, `${K.index}:queued`)
    }
    await redis.xgroup('CREATE', K.queue, GROUP, '0')
    await redis.config('SET', 'maxmemory-policy', 'noeviction')
    await redis.config('SET', 'maxmemory', '1')
    try {
      await t.rejects(take(), /OOM/)
    } finally {
      await redis.config('SET', 'maxmemory', '0')
    }
    t.same({
      run: await redis.hgetall(run('r1')), turns: await zsetOf(redis, K.turns), fair: await zsetOf(redis, K.fair),
      wake: await redis.lrange(K.wake, 0, -1), bytes: await redis.get(K.queuedBytes), queued: await zsetOf(redis, `${K.index}:queued`)
    }, before, 'nothing written')
    t.same(await pendingOf(redis, K.queue, GROUP), [], 'nothing held')
    t.equal(await takeId(), 'r1', 'taken once memory is back')
  })

  const release = (id: string, entry: string, recordAsStarted: string, recordAsQueued: string): Promise<boolean> => RELEASE.call(redis, {
    run: run(id), queue: K.queue, turns: K.turns, fair: K.fair, wake: K.wake, queuedBytes: K.queuedBytes, dueSet: K.dueSet, index: K.index,
    entry, runId: id, recordAsStarted, recordAsQueued
  })

  t.test('RELEASE gives a run TAKE started back exactly as it was queued, in its turn', async t => {
    await submit('r1', { expiry: 9_000, urgency: 2, caller: 'alice' })
    const queued = await redis.hgetall(run('r1'))
    const turns = await zsetOf(redis, K.turns)
    const taken = await take()
    if (taken.kind !== 'taken' || taken.run.started === undefined) throw new Error('not taken')
    t.equal(await release('r1', taken.run.entry, taken.run.started.record, taken.run.queued), true)
    const [[entry = '', fields = {}] = []] = await streamOf(redis, K.queue)
    t.not(entry, taken.run.entry, 'a new entry')
    t.same(fields, { run: 'r1', turn: '1' })
    t.same(await redis.hgetall(run('r1')), { ...queued, entry }, 'its record as queued, its bytes, no owner: only its entry is new')
    t.same(await pendingOf(redis, K.queue, GROUP), [], 'the old entry acknowledged (and deleted)')
    t.same(await zsetOf(redis, K.turns), turns, 'the turn it had')
    t.same(await zsetOf(redis, K.dueSet), [['r1', 9_000]], 'its time limit back')
    t.same(await zsetOf(redis, `${K.index}:queued`), [['r1', CREATED]])
    t.same(await zsetOf(redis, `${K.index}:running`), [])
    t.equal(await redis.get(K.queuedBytes), '5')
    t.same(await redis.lrange(K.wake, 0, -1), ['2'], 'a wake-up of its urgency')
    t.match(await take(), { kind: 'taken', run: { runId: 'r1', entry } }, 'taken again')
  })

  t.test('RELEASE does not put back a run changed meanwhile (canceled): its entry alone goes', async t => {
    await submit('r1')
    const taken = await take()
    if (taken.kind !== 'taken' || taken.run.started === undefined) throw new Error('not taken')
    const canceled = JSON.stringify({ ...queuedOf('r1'), status: 'canceled' })
    await redis.hset(run('r1'), 'record', canceled)
    const hash = await redis.hgetall(run('r1'))
    t.equal(await release('r1', taken.run.entry, taken.run.started.record, taken.run.queued), false)
    t.same(await redis.hgetall(run('r1')), hash, 'its hash untouched')
    t.same(await streamOf(redis, K.queue), [])
    t.same(await pendingOf(redis, K.queue, GROUP), [])
    t.same(await zsetOf(redis, K.turns), [])
    t.equal(await redis.exists(K.wake), 0, 'no wake-up')
    t.equal(await redis.get(K.queuedBytes), '0')
  })

  t.test('RELEASE of a run taken unstarted (a takeover): queued again in its turn; one of the version before gets one', async t => {
    await submit('r1')
    await redis.xgroup('CREATE', K.queue, GROUP, '0')
    const entry = await entryOf('r1')
    const turns = await zsetOf(redis, K.turns)
    await redis.del(K.turns)
    t.equal(await release('r1', entry, '', ''), true)
    t.same(await zsetOf(redis, K.turns), turns, 'the turn its hash kept')
    await redis.hdel(run('r1'), 'turn', 'turn_at')
    await redis.del(K.turns, K.fair)
    t.equal(await release('r1', await entryOf('r1'), '', ''), true)
    const last = await entryOf('r1')
    t.same(await zsetOf(redis, K.turns), [[memberOf(last, 'r1'), 3 * SPAN]], 'a turn of its own, from its new entry')
    t.equal(await redis.hget(run('r1'), 'turn'), memberOf(last, 'r1'))
  })

  t.test('START_READ starts a run taken over (compare and set), reading its request', async t => {
    await submit('r1', { expiry: 9_000 })
    const old = JSON.stringify(queuedOf('r1'))
    const started = JSON.stringify(startedRecord(queuedOf('r1'), CREATED, STARTED_AT))
    const start = (oldRecord: string): ReturnType<typeof START_READ.call> => START_READ.call(redis, {
      run: run('r1'), queuedBytes: K.queuedBytes, dueSet: K.dueSet, index: K.index, oldRecord, newRecord: started, owner: 'sidecar-b', runId: 'r1'
    })
    t.equal(await start('{"stale":1}'), undefined, 'a record changed meanwhile: not started')
    t.equal(await redis.hget(run('r1'), 'record'), old)
    t.same(await start(old), { request: Buffer.from(REQUEST), body: Buffer.from('hello'), webhook: null })
    t.match(await redis.hgetall(run('r1')), { record: started, owner: 'sidecar-b', queued_bytes: '0', request: REQUEST, body: 'hello' })
    t.same(await zsetOf(redis, `${K.index}:running`), [['r1', CREATED]])
    t.same(await zsetOf(redis, `${K.index}:queued`), [])
    t.same(await zsetOf(redis, K.dueSet), [])
    t.equal(await redis.get(K.queuedBytes), '0')
  })

  t.test('TURNS_BY_URGENCY counts the turns of each urgency; RUNNING the entries taken', async t => {
    for (const [id, urgency] of [['r1', 0], ['r2', 3], ['r3', 3], ['r4', 7]] as const) await submit(id, { urgency })
    t.same(await TURNS_BY_URGENCY.call(redis, { turns: K.turns }), [1, 0, 0, 2, 0, 0, 0, 1])
    t.equal(await RUNNING.call(redis, { queue: K.queue, turns: K.turns }), 0)
    await take()
    await take()
    t.same(await TURNS_BY_URGENCY.call(redis, { turns: K.turns }), [0, 0, 0, 1, 0, 0, 0, 1])
    t.equal(await RUNNING.call(redis, { queue: K.queue, turns: K.turns }), 2)
  })

  t.test('TAKE\'s and START_READ\'s replies are read into their types; one they never give throws', async t => {
    t.same(TAKE.parse(0), { kind: 'stale' })
    t.same(TAKE.parse([5]), { kind: 'none', seen: 5 })
    t.same(TAKE.parse([-1, 2]), { kind: 'capped', urgency: 2 })
    t.throws(() => TAKE.parse([1, 2, 3]), /TAKE: unexpected reply/)
    const taken = ['r1', 'e', 'q', '', '', 0, 0, Buffer.from(''), 's', null, null, null].map(value => typeof value === 'string' ? Buffer.from(value) : value)
    t.match(TAKE.parse(taken), { kind: 'taken', next: undefined, drained: false })
    t.throws(() => TAKE.parse(taken.map((value, i) => i === 7 ? Buffer.from('x') : value)), /TAKE: unexpected reply/)
    t.throws(() => TAKE.parse(taken.map((value, i) => i === 9 ? 1 : value)), /TAKE: unexpected reply/)
    t.throws(() => START_READ.parse([2]), /START_READ: unexpected reply/)
  })
})
