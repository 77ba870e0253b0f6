import t from 'tap'
import { APPEND_EVENT, WEBHOOK_STATE } from '../../../../src/runs/store/redis/redis-scripts.ts'
import { publishedOn, scriptRedis, streamOf } from '../../../helpers/redis-state.ts'

// A run's events and its webhook state on hand-made key states: events appended in order by the
// run's owner only, a gap refused unless skipped, the oldest trimmed by count and by bytes.

const RUN = 'as:{p/a}:run:r1'
const EVENTS = 'as:{p/a}:events:r1'
const LIVE = 'as:{p/a}:live:r1'

t.test('the event scripts', async t => {
  const redis = await scriptRedis(t)

  const append = (n: number, data: string, fields: Partial<Parameters<typeof APPEND_EVENT.call>[1]> = {}): ReturnType<typeof APPEND_EVENT.call> =>
    APPEND_EVENT.call(redis, {
      run: RUN, events: EVENTS, entryId: `0-${n + 1}`, data, maxEvents: 100, liveChannel: LIVE, n, maxBytes: 1_000_000, skip: '', writer: 'sidecar-a', ...fields
    })
  const running = async (): Promise<void> => { await redis.hset(RUN, { record: '{"status":"running"}', owner: 'sidecar-a' }) }

  t.test('APPEND_EVENT appends the next event, counts it and its bytes, and tells the followers `<n>\\n<data>`', async t => {
    await running()
    const published = await publishedOn(redis, LIVE, async () => {
      t.equal(await append(0, 'first'), 'appended')
      t.equal(await append(1, 'two\nlines'), 'appended')
    })
    t.same(published, ['0\nfirst', '1\ntwo\nlines'])
    t.same(await streamOf(redis, EVENTS), [['0-1', { d: 'first' }], ['0-2', { d: 'two\nlines' }]])
    t.same(await redis.hgetall(RUN), { record: '{"status":"running"}', owner: 'sidecar-a', events: '2', event_bytes: '14' })
    t.equal(await redis.ttl(EVENTS), -1, 'a running run has no ttl: nor its events')
  })

  t.test('APPEND_EVENT refuses a retry (an event there already) and changes nothing', async t => {
    await running()
    await append(0, 'first')
    t.equal(await append(0, 'first'), 'refused')
    t.same(await streamOf(redis, EVENTS), [['0-1', { d: 'first' }]])
    t.equal(await redis.hget(RUN, 'events'), '1')
  })

  t.test('APPEND_EVENT refuses a gap unless skipped: then the events before are taken as lost', async t => {
    await running()
    await append(0, 'e0')
    t.equal(await append(2, 'e2'), 'gap')
    t.same(await streamOf(redis, EVENTS), [['0-1', { d: 'e0' }]])
    t.equal(await redis.hget(RUN, 'events'), '1')
    t.equal(await append(2, 'e2', { skip: '1' }), 'appended')
    t.same(await streamOf(redis, EVENTS), [['0-1', { d: 'e0' }], ['0-3', { d: 'e2' }]])
    t.same(await redis.hmget(RUN, 'events', 'event_bytes'), ['3', '4'])
  })

  t.test('APPEND_EVENT: fencing: a run another sidecar owns takes no event, and a run gone gets no events key', async t => {
    await running()
    await redis.hset(RUN, 'owner', 'sidecar-b')
    t.equal(await append(0, 'late'), 'refused')
    t.equal(await redis.exists(EVENTS), 0)
    t.equal(await redis.hexists(RUN, 'events'), 0)
    await redis.del(RUN)
    t.equal(await append(0, 'late'), 'refused')
    t.equal(await redis.exists(EVENTS, RUN), 0)
  })

  t.test('APPEND_EVENT: a run with no owner yet (its record alone) takes events', async t => {
    await redis.hset(RUN, 'record', '{"status":"running"}')
    t.equal(await append(0, 'x'), 'appended')
    t.same(await streamOf(redis, EVENTS), [['0-1', { d: 'x' }]])
  })

  t.test('APPEND_EVENT trims the oldest past the most events kept', async t => {
    await running()
    for (let n = 0; n < 5; n++) t.equal(await append(n, `e${n}`, { maxEvents: 3 }), 'appended')
    t.same(await streamOf(redis, EVENTS), [['0-3', { d: 'e2' }], ['0-4', { d: 'e3' }], ['0-5', { d: 'e4' }]])
    t.same(await redis.hmget(RUN, 'events', 'event_bytes'), ['5', '6'], 'the next number, and the kept events\' bytes')
  })

  t.test('APPEND_EVENT trims the oldest past the most bytes kept; the newest always stays', async t => {
    await running()
    for (let n = 0; n < 3; n++) t.equal(await append(n, 'abcd', { maxBytes: 10 }), 'appended')
    t.same(await streamOf(redis, EVENTS), [['0-2', { d: 'abcd' }], ['0-3', { d: 'abcd' }]])
    t.equal(await redis.hget(RUN, 'event_bytes'), '8')
    t.equal(await append(3, 'x'.repeat(25), { maxBytes: 10 }), 'appended')
    t.same(await streamOf(redis, EVENTS), [['0-4', { d: 'x'.repeat(25) }]], 'alone over the bound, the newest stays')
    t.same(await redis.hmget(RUN, 'events', 'event_bytes'), ['4', '25'])
  })

  t.test('APPEND_EVENT: an event appended after the run ended (a ttl) expires with it', async t => {
    await running()
    await redis.expire(RUN, 300)
    t.equal(await append(0, 'after the end'), 'appended')
    const ttl = await redis.ttl(EVENTS)
    t.ok(ttl > 290 && ttl <= 300, `events kept ${ttl} s`)
  })

  const state = (status: string, attempts: number): Promise<boolean> => WEBHOOK_STATE.call(redis, { run: RUN, status, attempts })

  t.test('WEBHOOK_STATE writes `<status> <attempts>` beside the record; the secret goes once it ended', async t => {
    await redis.hset(RUN, { record: '{"status":"succeeded"}', webhook: '{"secret":"s"}' })
    t.equal(await state('pending', 1), true)
    t.same(await redis.hgetall(RUN), { record: '{"status":"succeeded"}', webhook: '{"secret":"s"}', webhook_state: 'pending 1' })
    t.equal(await state('delivered', 2), true)
    t.same(await redis.hgetall(RUN), { record: '{"status":"succeeded"}', webhook_state: 'delivered 2' }, 'the record is not rewritten')
  })

  t.test('WEBHOOK_STATE: a run gone is not made again', async t => {
    t.equal(await state('failed', 5), false)
    t.equal(await redis.exists(RUN), 0)
  })
})
