import t from 'tap'
import { nextAttempt, retriedRecord, startedRecord } from '../../../../src/runs/run-record.ts'
import type { RunRecord } from '../../../../src/runs/run-data.ts'
import { GROUP, RETRY, TAKE } from '../../../../src/runs/store/redis/redis-queue-scripts.ts'
import { APPEND_EVENT } from '../../../../src/runs/store/redis/redis-scripts.ts'
import { pendingOf, publishedOn, redisNow, scriptRedis, streamOf, zsetOf } from '../../../helpers/redis-state.ts'
import { CREATED, K, memberOf, P, queueCalls, runKey, SPAN, STARTED_AT } from './queue-state.ts'

// Attempts on hand-made key states (docs/runs.md, "Running on interruptible capacity"): TAKE
// counting a run's attempts, RETRY putting an interrupted one back in its place with its retry
// event, TAKE keeping it a moment from the sidecar that lost it, and RETRY refused whole.

const run = runKey
const events = (id: string): string => `${P}:events:${id}`
const live = (id: string): string => `${P}:live:${id}`
const STARTED = STARTED_AT
const HOOK = { status: 'pending', attempts: 0 } as const
const queuedOf = (id: string): RunRecord => ({ run_id: id, status: 'queued', created_at: new Date(CREATED).toISOString(), webhook: { ...HOOK } })

t.test('attempts in the queue scripts', async t => {
  const redis = await scriptRedis(t)

  const { submit, take, takeId } = queueCalls(redis, queuedOf, { webhook: '{"url":"https://hook.example"}' }, { attempts: '1' })
  /** The run taken (started), and its record as TAKE wrote it. */
  const taken = async (fields: Partial<Parameters<typeof TAKE.call>[1]> = {}): Promise<{ entry: string, record: string, firstEvent: number | undefined }> => {
    const outcome = await take(fields)
    if (outcome.kind !== 'taken' || outcome.run.started === undefined) throw new Error(`not taken: ${JSON.stringify(outcome)}`)
    return { entry: outcome.run.entry, record: outcome.run.started.record, firstEvent: outcome.run.started.firstEvent }
  }
  /** RETRY of run `id` whose attempt (`record` as started, its entry) was interrupted at `at`, lost by `lostBy`. */
  const retry = (id: string, attempt: { entry: string, record: string }, at: number, fields: Partial<Parameters<typeof RETRY.call>[1]> = {}): ReturnType<typeof RETRY.call> => {
    const record = JSON.parse(attempt.record) as RunRecord
    const queued = retriedRecord(record, 'replica stopped', at)
    return RETRY.call(redis, {
      run: run(id), queue: K.queue, turns: K.turns, fair: K.fair, wake: K.wake, queuedBytes: K.queuedBytes, dueSet: K.dueSet, index: K.index, events: events(id),
      oldRecord: attempt.record, newRecord: JSON.stringify(queued), entry: attempt.entry, runId: id, ranMs: at - STARTED,
      avoid: `sidecar-a ${at + 2000}`, event: JSON.stringify({ attempt: (queued.attempt ?? 1) + 1, reason: 'replica stopped' }), liveChannel: live(id), ...fields
    })
  }

  t.test('TAKE counting attempts: the record gains attempt 1 (the bytes run-record.ts makes), the reply the first event\'s number', async t => {
    await submit('r1')
    const first = await taken()
    const expected = startedRecord(queuedOf('r1'), CREATED, STARTED, nextAttempt(queuedOf('r1')))
    t.same(JSON.parse(first.record), expected)
    t.equal(first.record, '{"run_id":"r1","status":"running","created_at":"1970-01-01T00:00:01.000Z","started_at":"1970-01-01T00:00:05.000Z","queue_time_ms":4000,' +
      '"attempt":1,"webhook":{"status":"pending","attempts":0}}', 'attempt before webhook')
    t.equal(first.firstEvent, 0)
    await submit('r2', { webhook: '', record: JSON.stringify({ ...queuedOf('r2'), webhook: undefined }) })
    t.match(JSON.parse((await taken()).record), { attempt: 1 }, 'a record without a webhook: attempt at its end')
    await submit('r3')
    const plain = await take({ attempts: '' })
    if (plain.kind !== 'taken') throw new Error('not taken')
    t.same(JSON.parse(plain.run.started?.record ?? '{}'), startedRecord(queuedOf('r3'), CREATED, STARTED), 'not counting: the record as it always was')
    t.equal(plain.run.started?.firstEvent, undefined, 'and the reply as it always was')
  })

  t.test('RETRY queues an interrupted run again, its retry event appended and told; the next TAKE counts attempt 2', async t => {
    await submit('r1', { expiry: 9_000 })
    const turn = memberOf(await redis.hget(run('r1'), 'entry') as string, 'r1')
    const first = await taken()
    await redis.xadd(events('r1'), '0-1', 'd', 'step 0')
    await redis.hset(run('r1'), 'events', 1, 'event_bytes', 6)
    const event = '{"attempt":2,"reason":"replica stopped"}'
    const published = await publishedOn(redis, live('r1'), async () => { t.equal(await retry('r1', first, STARTED + 1000), 1, 'its retry event: event 1') })
    t.same(published, [`r1\n${event}`], 'followers told: `r<n>\\n<data>`')
    t.same(await streamOf(redis, events('r1')), [['0-1', { d: 'step 0' }], ['0-2', { r: event }]], 'the retry event after the attempt\'s events, field r')
    const hash = await redis.hgetall(run('r1'))
    t.equal(hash.record, JSON.stringify(retriedRecord(JSON.parse(first.record) as RunRecord, 'replica stopped', STARTED + 1000)))
    t.match(hash, { owner: '', queued_bytes: '5', avoid: `sidecar-a ${STARTED + 3000}`, ran_ms: '1000', events: '2', event_bytes: String(6 + event.length), turn, turn_at: String(3 * SPAN) })
    t.not(hash.entry, first.entry, 'a new entry')
    t.same(await pendingOf(redis, K.queue, GROUP), [], 'the interrupted attempt\'s entry acknowledged')
    t.same(await streamOf(redis, K.queue), [[hash.entry as string, { run: 'r1', turn: '1' }]])
    t.same(await zsetOf(redis, `${K.index}:queued`), [['r1', CREATED]])
    t.same(await zsetOf(redis, `${K.index}:running`), [])
    t.same(await zsetOf(redis, K.dueSet), [['r1', 9_000]], 'its time limit back')
    t.equal(await redis.get(K.queuedBytes), '5')
    t.same(await redis.lrange(K.wake, 0, -1), ['3'], 'a wake-up of its urgency')

    const second = await taken({ taker: 'sidecar-b', startedAtMs: STARTED + 1500, startedAtIso: new Date(STARTED + 1500).toISOString() })
    const record = JSON.parse(second.record) as RunRecord
    t.same({ attempt: record.attempt, queue_time_ms: record.queue_time_ms, started_at: record.started_at, interruptions: record.interruptions }, {
      attempt: 2, queue_time_ms: 4500, started_at: new Date(STARTED + 1500).toISOString(), interruptions: [{ attempt: 1, reason: 'replica stopped', at: new Date(STARTED + 1000).toISOString() }]
    }, 'queue_time_ms: both waits (4000 + 500), not the second ran')
    t.equal(second.firstEvent, 2, 'its events come after the retry event')
    t.equal(await redis.hget(run('r1'), 'owner'), 'sidecar-b')
  })

  t.test('between attempts nobody appends to the run: the lost attempt\'s late events are refused', async t => {
    await submit('r1')
    const first = await taken()
    await retry('r1', first, STARTED + 1000)
    t.equal(await APPEND_EVENT.call(redis, {
      run: run('r1'), events: events('r1'), entryId: '0-2', data: 'late', maxEvents: 100, liveChannel: live('r1'), n: 1, maxBytes: 1_000_000, skip: '', writer: 'sidecar-a'
    }), 'refused')
    t.same(await streamOf(redis, events('r1')), [['0-1', { r: '{"attempt":2,"reason":"replica stopped"}' }]])
  })

  t.test('RETRY keeps its place: before every run of its urgency submitted after it, its own order among equals', async t => {
    for (const id of ['a1', 'a2', 'a3']) await submit(id, { caller: 'alice' })
    t.equal(await takeId(), 'a1')
    const a2 = await taken()
    await submit('b1', { caller: 'bob' }) // at the virtual time: a2's tag
    t.equal(await retry('a2', a2, STARTED + 100), 0)
    const order: string[] = []
    for (let id = await takeId({ taker: 'sidecar-b' }); id !== ''; id = await takeId({ taker: 'sidecar-b' })) order.push(id)
    t.same(order, ['a2', 'b1', 'a3'])

    // the queue drained, its order's state gone (a take that finds none queued drops it): a run
    // put back, whatever its own tag, still comes before the ones submitted since
    for (const id of ['c0', 'c1', 'c2']) await submit(id, { caller: 'carol' })
    t.equal(await takeId(), 'c0')
    const c1 = await taken()
    t.equal(await takeId(), 'c2')
    await redis.del(K.fair)
    await submit('d1', { caller: 'dave' })
    t.equal(await retry('c1', c1, STARTED + 100), 0)
    t.same((await zsetOf(redis, K.turns)).map(([member, score]) => [member.slice(23), score]), [['c1 carol', 3 * SPAN], ['d1 dave', 3 * SPAN]])
    t.equal(await takeId({ taker: 'sidecar-b' }), 'c1')
  })

  t.test('TAKE passes a run put back over for the sidecar that lost it, until its time; a wake-up is left for the others', async t => {
    await submit('r1')
    const first = await taken()
    const now = await redisNow(redis) // a take behind a BLPOP reads Redis's clock
    await retry('r1', first, now) // kept from sidecar-a until now + 2000
    await redis.del(K.wake) // its wake-up used by sidecar-a's BLPOP
    const at = (ms: number): Partial<Parameters<typeof TAKE.call>[1]> => ({ startedAtMs: ms, startedAtIso: new Date(ms).toISOString() })
    t.same(await take({ woken: '1' }), { kind: 'capped', urgency: 3 }, 'passed over, as a capped caller\'s run')
    t.same(await redis.lrange(K.wake, 0, -1), ['3'], 'a wake-up left for another sidecar')
    t.same(await take({ ...at(now + 300) }), { kind: 'capped', urgency: 3 })
    t.same(await redis.lrange(K.wake, 0, -1), ['3'], 'one, however often it is passed over')
    const second = await take({ ...at(now + 2000) })
    t.match(second, { kind: 'taken', run: { runId: 'r1' } }, 'its time over: the one that lost it takes it')
    t.match(JSON.parse(second.kind === 'taken' ? second.run.started?.record ?? '{}' : '{}'), { attempt: 2 })
  })

  t.test('TAKE\'s reply counting attempts, and RETRY\'s, are read into their types; one they never give throws', async t => {
    const taken = ['r1', 'e', 'q', '', '', 0, 0, Buffer.from(''), 's', null, null, null].map(value => typeof value === 'string' ? Buffer.from(value) : value)
    t.match(TAKE.parse([...taken, 7]), { kind: 'taken', run: { started: { record: 's', firstEvent: 7 } } })
    t.throws(() => TAKE.parse([...taken, Buffer.from('7')]), /TAKE: unexpected reply/)
    t.throws(() => TAKE.parse([...taken, 7, 8]), /TAKE: unexpected reply/)
    t.equal(RETRY.parse(3), 3)
    t.equal(RETRY.parse(-1), undefined)
    t.throws(() => RETRY.parse('1'), /RETRY: unexpected reply/)
  })

  t.test('RETRY of a record changed meanwhile (a cancel) writes nothing; on a Redis out of memory, nothing either', async t => {
    await submit('r1')
    const first = await taken()
    const canceled = JSON.stringify({ ...JSON.parse(first.record) as RunRecord, status: 'canceled' })
    await redis.hset(run('r1'), 'record', canceled)
    const before = { run: await redis.hgetall(run('r1')), queue: await streamOf(redis, K.queue), turns: await zsetOf(redis, K.turns), wake: await redis.lrange(K.wake, 0, -1) }
    t.equal(await retry('r1', first, STARTED + 100), undefined)
    t.same({ run: await redis.hgetall(run('r1')), queue: await streamOf(redis, K.queue), turns: await zsetOf(redis, K.turns), wake: await redis.lrange(K.wake, 0, -1) }, before)
    t.equal(await redis.exists(events('r1')), 0, 'no retry event')

    await redis.hset(run('r1'), 'record', first.record)
    await Promise.all(RETRY.scripts.map(async script => { await script.load(redis) }))
    await redis.config('SET', 'maxmemory-policy', 'noeviction')
    await redis.config('SET', 'maxmemory', '1')
    try {
      await t.rejects(retry('r1', first, STARTED + 100), /OOM/)
    } finally {
      await redis.config('SET', 'maxmemory', '0')
    }
    t.equal(await redis.hget(run('r1'), 'record'), first.record, 'still running as it was')
    t.same(await pendingOf(redis, K.queue, GROUP), [[first.entry, 'sidecar-a', 1]], 'its entry still held')
  })
})
