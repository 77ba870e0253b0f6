import t from 'tap'
import { CANCEL_QUEUED } from '../../../../src/runs/store/redis/redis-list-scripts.ts'
import { GROUP, SUBMIT, TAKE, type TakeOutcome } from '../../../../src/runs/store/redis/redis-queue-scripts.ts'
import { DROP_ENTRY, END_AND_HOLD, END_AND_TAKE, HOLD_DELIVERY, KEEP_HELD, MARK_FOLLOWED, SENDERS, TRANSITION } from '../../../../src/runs/store/redis/redis-scripts.ts'
import { pendingOf, publishedOn, scriptRedis, streamOf, zsetOf } from '../../../helpers/redis-state.ts'
import { patient } from '../../../helpers/timing.ts'

// A run's end on hand-made key states: the compare-and-set that fences a stale writer out, what an
// end writes and drops (result, owner, retention, indexes, its entry), `done` told only to a run
// followed, a queued run's cancel giving back its turn, time limit and bytes; an end that takes the
// next run or holds a delivery in the same step; and the heartbeat's hold on its entries.

const P = 'as:{p/a}'
const SPAN = 2 ** 40
const K = {
  queue: `${P}:queue`, queuedBytes: `${P}:queued-bytes`, oldRunningSet: `${P}:running`, expiry: `${P}:expiry`, turns: `${P}:turns`, index: `${P}:runs`,
  fair: `${P}:fair`, wake: `${P}:wake`
}
const RUN = `${P}:run:r1`
const EVENTS = `${P}:events:r1`
const LIVE = `${P}:live:r1`
const record = (status: string, more = ''): string => `{"run_id":"r1","status":"${status}","created_at":"1970-01-01T00:00:01.000Z"${more}}`
const RUNNING = record('running', ',"started_at":"1970-01-01T00:00:05.000Z","queue_time_ms":4000')
const SUCCEEDED = record('succeeded', ',"started_at":"1970-01-01T00:00:05.000Z","completed_at":"1970-01-01T00:00:09.000Z"')
const CANCELED = record('canceled', ',"completed_at":"1970-01-01T00:00:02.000Z"')

t.test('the transition scripts', async t => {
  const redis = await scriptRedis(t)

  type TransitionFields = Parameters<typeof TRANSITION.call>[1]
  const fieldsOf = (fields: Partial<TransitionFields>): TransitionFields => ({
    run: RUN, queue: K.queue, events: EVENTS, queuedBytes: K.queuedBytes, oldRunningSet: K.oldRunningSet, expiry: K.expiry, turns: K.turns, index: K.index,
    oldRecord: RUNNING, newRecord: SUCCEEDED, result: '{"ok":true}', owner: 'sidecar-b', entry: '', ttlSeconds: 600, liveChannel: LIVE, message: 'done',
    runId: 'r1', indexCutoffMs: '', ...fields
  })
  const transition = (fields: Partial<TransitionFields> = {}): Promise<boolean> => TRANSITION.call(redis, fieldsOf(fields))

  /** A run TAKE started for sidecar-a, its entry pending there: the hash as TAKE leaves it, and its entry. */
  const running = async (fields: Record<string, string> = {}): Promise<string> => {
    const entry = await redis.xadd(K.queue, '*', 'run', 'r1', 'turn', '1') as string
    await redis.xgroup('CREATE', K.queue, GROUP, '0')
    await redis.call('XCLAIM', K.queue, GROUP, 'sidecar-a', 0, entry, 'FORCE', 'JUSTID')
    await redis.hset(RUN, {
      record: RUNNING, request: '{}', body: 'hello', async: '1', entry, queued_bytes: '0', turn: 't-r1', turn_at: String(3 * SPAN), at: '1000',
      expires: '9000', webhook: '{"url":"https://hook.example"}', owner: 'sidecar-a', ...fields
    })
    await redis.zadd(`${K.index}:running`, 1000, 'r1')
    return entry
  }
  const ttlOf = async (key: string): Promise<number> => await redis.ttl(key)

  t.test('TRANSITION refuses a stale old record (0): nothing written, nothing told', async t => {
    const entry = await running({ followed: '1' })
    const hash = await redis.hgetall(RUN)
    const told = await publishedOn(redis, LIVE, async () => {
      t.equal(await transition({ oldRecord: record('queued'), entry }), false)
    })
    t.same(told, [])
    t.same(await redis.hgetall(RUN), hash)
    t.equal(await ttlOf(RUN), -1)
    t.same(await pendingOf(redis, K.queue, GROUP), [[entry, 'sidecar-a', 1]], 'its entry still held')
    t.same(await zsetOf(redis, `${K.index}:running`), [['r1', 1000]])
    t.equal(await redis.exists(`${K.index}:succeeded`), 0)
  })

  t.test('TRANSITION ends a run: result and owner written, retention, index moved, request and the rest dropped, entry let go', async t => {
    const entry = await running()
    await redis.xadd(EVENTS, '0-1', 'd', 'x') // events of a run whose hash counts none (`events` unset): left alone
    const told = await publishedOn(redis, LIVE, async () => {
      t.equal(await transition({ entry }), true)
    })
    t.same(told, [], 'nobody follows it: nothing published')
    t.same(await redis.hgetall(RUN), { record: SUCCEEDED, result: '{"ok":true}', async: '1', entry, owner: 'sidecar-b' })
    const ttl = await ttlOf(RUN)
    t.ok(ttl > 590 && ttl <= 600, `kept ${ttl} s`)
    t.equal(await ttlOf(EVENTS), -1, 'no `events` field: its events key is not touched')
    t.same(await zsetOf(redis, `${K.index}:running`), [])
    t.same(await zsetOf(redis, `${K.index}:succeeded`), [['r1', 1000]], 'at its created_at (`at`)')
    t.same(await streamOf(redis, K.queue), [], 'its entry deleted')
    t.same(await pendingOf(redis, K.queue, GROUP), [], 'and acknowledged')
  })

  t.test('TRANSITION: a run with events has its events kept as long; a followed run is told `done`', async t => {
    const entry = await running({ events: '3', followed: '1' })
    await redis.xadd(EVENTS, '0-1', 'd', 'x')
    const told = await publishedOn(redis, LIVE, async () => {
      t.equal(await transition({ entry }), true)
    })
    t.same(told, ['done'])
    const ttl = await ttlOf(EVENTS)
    t.ok(ttl > 590 && ttl <= 600, `its events kept ${ttl} s`)
    t.same(await redis.hgetall(RUN), { record: SUCCEEDED, result: '{"ok":true}', async: '1', entry, owner: 'sidecar-b', events: '3', followed: '1' })
  })

  t.test('TRANSITION: no message, nothing published even when followed; no ttl (not finished), nothing dropped', async t => {
    const entry = await running({ followed: '1' })
    const hash = await redis.hgetall(RUN)
    const told = await publishedOn(redis, LIVE, async () => {
      t.equal(await transition({ newRecord: record('running', ',"x":1'), result: '', owner: '', ttlSeconds: 0, message: '' }), true)
    })
    t.same(told, [])
    t.same(await redis.hgetall(RUN), { ...hash, record: record('running', ',"x":1') })
    t.equal(await ttlOf(RUN), -1)
    t.same(await pendingOf(redis, K.queue, GROUP), [[entry, 'sidecar-a', 1]], 'no entry given: none let go')
  })

  t.test('TRANSITION cancels a queued run: its turn and due-set member go, its bytes are given back', async t => {
    const entry = await redis.xadd(K.queue, '*', 'run', 'r1', 'turn', '1') as string
    const other = await redis.xadd(K.queue, '*', 'run', 'r2', 'turn', '1') as string
    await redis.xgroup('CREATE', K.queue, GROUP, '0')
    await redis.hset(RUN, {
      record: record('queued'), request: '{}', body: 'hello', async: '1', entry, queued_bytes: '5', turn: 't-r1', turn_at: String(3 * SPAN), at: '1000',
      expires: '9000', webhook: '{"url":"https://hook.example"}'
    })
    await redis.zadd(K.turns, 3 * SPAN, 't-r1', 3 * SPAN + 1, 't-r2')
    await redis.zadd(K.expiry, 9000, 'r1', 9500, 'r2')
    await redis.set(K.queuedBytes, 8)
    await redis.zadd(`${K.index}:queued`, 1000, 'r1', 1001, 'r2')
    t.equal(await transition({ oldRecord: record('queued'), newRecord: CANCELED, result: '{"canceled":true}', owner: '', entry }), true)
    t.same(await redis.hgetall(RUN), { record: CANCELED, result: '{"canceled":true}', async: '1', entry }, 'no owner given: none written')
    t.same(await zsetOf(redis, K.turns), [['t-r2', 3 * SPAN + 1]])
    t.same(await zsetOf(redis, K.expiry), [['r2', 9500]])
    t.equal(await redis.get(K.queuedBytes), '3')
    t.same(await zsetOf(redis, `${K.index}:queued`), [['r2', 1001]])
    t.same(await zsetOf(redis, `${K.index}:canceled`), [['r1', 1000]])
    t.same((await streamOf(redis, K.queue)).map(([id]) => id), [other])
  })

  t.test('TRANSITION: a run of the version before (no `at`) leaves the old running set, its index read for its score', async t => {
    await running()
    await redis.hdel(RUN, 'at')
    await redis.sadd(K.oldRunningSet, RUN, `${P}:run:r9`)
    await redis.zadd(`${K.index}:running`, 500, 'r1')
    await redis.zadd(`${K.index}:succeeded`, 100, 'old', 300, 'recent')
    t.equal(await transition({ indexCutoffMs: 200 }), true)
    t.same(await redis.smembers(K.oldRunningSet), [`${P}:run:r9`])
    t.same(await zsetOf(redis, `${K.index}:succeeded`), [['recent', 300], ['r1', 500]], 'moved at its score; members created before the cutoff trimmed')
  })

  t.test('TRANSITION: a run of this version (`at`) keeps out of the old running set; about one end in 32 trims its new index', async t => {
    await running({ at: '1024' })
    await redis.sadd(K.oldRunningSet, RUN)
    await redis.zadd(`${K.index}:succeeded`, 100, 'old')
    t.equal(await transition({ indexCutoffMs: 200 }), true)
    t.same(await redis.smembers(K.oldRunningSet), [RUN], 'this version keeps none: not looked at')
    t.same(await zsetOf(redis, `${K.index}:succeeded`), [['r1', 1024]], 'created at 1024 ms, a multiple of 32: trimmed')
    await redis.flushdb()
    await running({ at: '1000' })
    await redis.zadd(`${K.index}:succeeded`, 100, 'old')
    t.equal(await transition({ indexCutoffMs: 200 }), true)
    t.same(await zsetOf(redis, `${K.index}:succeeded`), [['old', 100], ['r1', 1000]], 'otherwise not')
  })

  t.test('MARK_FOLLOWED marks a run followed, and recreates no run gone', async t => {
    await redis.hset(RUN, 'record', RUNNING)
    t.equal(await MARK_FOLLOWED.call(redis, { run: RUN }), true)
    t.same(await redis.hgetall(RUN), { record: RUNNING, followed: '1' })
    t.equal(await MARK_FOLLOWED.call(redis, { run: `${P}:run:gone` }), false)
    t.equal(await redis.exists(`${P}:run:gone`), 0)
  })

  /** r1 submitted and started by TAKE for sidecar-a, r2 queued behind it: r1's record as started. */
  const submitTwo = async (): Promise<string> => {
    for (const id of ['r1', 'r2']) {
      await SUBMIT.call(redis, {
        run: `${P}:run:${id}`, queue: K.queue, queuedBytes: K.queuedBytes, dueSet: K.expiry, index: K.index, turns: K.turns, fair: K.fair, wake: K.wake,
        record: record('queued').replace('r1', id), request: '{}', body: 'hello', webhook: '', depth: 10, runId: id, maxBytes: 100, expiry: '', createdAtMs: 1000,
        urgency: '', caller: '', sub: ''
      })
    }
    const taken = await TAKE.call(redis, takeFields('sidecar-a'))
    if (taken.kind !== 'taken' || taken.run.started === undefined) throw new Error('not taken')
    return taken.run.started.record
  }
  const takeFields = (taker: string): Parameters<typeof TAKE.call>[1] => ({
    turns: K.turns, fair: K.fair, wake: K.wake, queue: K.queue, queuedBytes: K.queuedBytes, dueSet: K.expiry, index: K.index,
    taker, runKeyPrefix: `${P}:run:`, look: '0', cappedCallers: '', startedAtMs: 5000, startedAtIso: new Date(5000).toISOString(), woken: '', attempts: ''
  })
  const endAndTake = (fields: Partial<TransitionFields>): Promise<TakeOutcome | undefined> => {
    const end = TRANSITION.build(fieldsOf(fields))
    const take = TAKE.build(takeFields('sidecar-a'))
    return END_AND_TAKE.call(redis, { transitionKeys: end.keys, takeKeys: take.keys, transitionArgs: end.args, takeArgs: take.args })
  }

  t.test('END_AND_TAKE: the record changed, {0}: nothing ended, nothing taken', async t => {
    const started = await submitTwo()
    const entry = await redis.hget(RUN, 'entry') as string
    t.equal(await endAndTake({ oldRecord: record('queued'), entry, owner: 'sidecar-a' }), undefined)
    t.equal(await redis.hget(RUN, 'record'), started)
    t.equal(await redis.hget(`${P}:run:r2`, 'record'), record('queued').replace('r1', 'r2'), 'r2 still queued')
    t.equal(await redis.zcard(K.turns), 1, 'its turn still there')
    t.same(await pendingOf(redis, K.queue, GROUP), [[entry, 'sidecar-a', 1]])
  })

  t.test('END_AND_TAKE: the run ended and the next one started, {1, TAKE\'s reply}', async t => {
    const started = await submitTwo()
    const entry = await redis.hget(RUN, 'entry') as string
    const next = await redis.hget(`${P}:run:r2`, 'entry') as string
    const taken = await endAndTake({ oldRecord: started, entry, owner: 'sidecar-a' })
    t.match(taken, { kind: 'taken', run: { runId: 'r2', entry: next, started: { body: Buffer.from('hello') } }, drained: true })
    t.equal(await redis.hget(RUN, 'record'), SUCCEEDED)
    t.match(await redis.hgetall(`${P}:run:r2`), { record: /"status":"running"/, owner: 'sidecar-a' })
    t.same(await pendingOf(redis, K.queue, GROUP), [[next, 'sidecar-a', 1]], 'r1\'s entry let go, r2\'s held')
    t.same(await zsetOf(redis, `${K.index}:running`), [['r2', 1000]])
    t.same(await zsetOf(redis, `${K.index}:succeeded`), [['r1', 1000]])
  })

  const DELIVERIES = `${P}:deliveries`
  const endAndHold = (fields: Partial<TransitionFields>): Promise<string | undefined> => {
    const end = TRANSITION.build(fieldsOf(fields))
    const hold = HOLD_DELIVERY.build({
      deliveriesStream: DELIVERIES, deliveryHash: `${P}:delivery:end:r1`, runId: 'r1', url: 'https://hook.example', body: '{}', secret: 's',
      consumer: 'sidecar-b', ttlSeconds: 60, deliveryId: 'end:r1', traceparent: '', tracestate: ''
    })
    return END_AND_HOLD.call(redis, { transitionKeys: end.keys, holdKeys: hold.keys, transitionArgs: end.args, holdArgs: hold.args })
  }

  t.test('END_AND_HOLD: the delivery written only with the end; the record changed: neither', async t => {
    const entry = await running()
    t.equal(await endAndHold({ oldRecord: record('queued'), entry }), undefined)
    t.equal(await redis.exists(DELIVERIES, `${P}:delivery:end:r1`), 0, 'no delivery')
    t.equal(await redis.hget(RUN, 'record'), RUNNING)
    const held = await endAndHold({ entry })
    t.match(held, /^\d+-\d+$/)
    t.equal(await redis.hget(RUN, 'record'), SUCCEEDED)
    t.same(await pendingOf(redis, DELIVERIES, SENDERS), [[held, 'sidecar-b', 1]])
    t.match(await redis.hgetall(`${P}:delivery:end:r1`), { run: 'r1', entry: held, secret: 's' })
  })

  /** An entry's holder and idle time (ms), as XPENDING tells them. */
  const heldBy = async (entry: string): Promise<[string, number] | undefined> => {
    const [found] = await redis.call('XPENDING', K.queue, GROUP, entry, entry, 1) as Array<[string, string, number, number]>
    return found === undefined ? undefined : [found[1], found[2]]
  }

  t.test('KEEP_HELD renews the entries still held, and reports lost one another took over (not refreshed) or one let go', async t => {
    const [mine, takenOver, letGo] = [
      await redis.xadd(K.queue, '*', 'run', 'r1') as string, await redis.xadd(K.queue, '*', 'run', 'r2') as string, await redis.xadd(K.queue, '*', 'run', 'r3') as string
    ]
    await redis.xgroup('CREATE', K.queue, GROUP, '0')
    for (const entry of [mine, takenOver, letGo]) await redis.call('XCLAIM', K.queue, GROUP, 'sidecar-a', 0, entry, 'FORCE', 'JUSTID', 'IDLE', 50_000)
    await redis.call('XCLAIM', K.queue, GROUP, 'sidecar-b', 0, takenOver, 'JUSTID', 'IDLE', 40_000) // taken over while sidecar-a was silent
    await redis.xack(K.queue, GROUP, letGo)
    t.same(await KEEP_HELD.call(redis, { stream: K.queue, group: GROUP, consumer: 'sidecar-a', ids: [mine, takenOver, letGo] }), [takenOver, letGo])
    const [holder, idle] = await heldBy(mine) ?? ['', -1]
    t.equal(holder, 'sidecar-a')
    t.ok(idle < patient(1000), `its idle time back to 0 (${idle} ms), not its 50 s`)
    const [other, otherIdle] = await heldBy(takenOver) ?? ['', -1]
    t.equal(other, 'sidecar-b', 'the other\'s still')
    t.ok(otherIdle >= 40_000, `and not refreshed (${otherIdle} ms idle)`)
    t.equal(await heldBy(letGo), undefined)
  })

  t.test('DROP_ENTRY acknowledges and deletes an entry: whether it was there', async t => {
    const entry = await running()
    t.equal(await DROP_ENTRY.call(redis, { stream: K.queue, group: GROUP, entry }), true)
    t.same(await streamOf(redis, K.queue), [])
    t.same(await pendingOf(redis, K.queue, GROUP), [])
    t.equal(await DROP_ENTRY.call(redis, { stream: K.queue, group: GROUP, entry }), false)
  })

  t.test('END_AND_TAKE\'s and END_AND_HOLD\'s replies are read into their types; one they never give throws', async t => {
    t.equal(END_AND_TAKE.parse([0]), undefined)
    t.same(END_AND_TAKE.parse([1, 0]), { kind: 'stale' })
    t.same(END_AND_TAKE.parse([1, [3]]), { kind: 'none', seen: 3 })
    t.throws(() => END_AND_TAKE.parse([0, 0]), /END_AND_TAKE: unexpected reply/)
    t.throws(() => END_AND_TAKE.parse([2]), /END_AND_TAKE: unexpected reply/)
    t.equal(END_AND_HOLD.parse(null), undefined)
    t.equal(END_AND_HOLD.parse('1-0'), '1-0')
    t.equal(TRANSITION.parse(0), false)
    t.throws(() => TRANSITION.parse(2), /TRANSITION: unexpected reply/)
  })

  t.test('the scripts that run another as a function carry its source once, as that script\'s own', async t => {
    for (const script of [END_AND_TAKE, END_AND_HOLD, CANCEL_QUEUED]) {
      t.ok(script.source.startsWith(`local function transition (KEYS, ARGV)${TRANSITION.source}end\n`), `${script.name}: transition first`)
      t.equal(script.source.split('local function transition ').length, 2, `${script.name}: once`)
    }
    t.ok(END_AND_TAKE.source.includes(`local function take (KEYS, ARGV)${TAKE.source}end\n`))
    t.ok(END_AND_HOLD.source.includes(`local function hold (KEYS, ARGV)${HOLD_DELIVERY.source}end\n`))
  })
})
