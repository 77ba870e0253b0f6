import t from 'tap'
import { CLAIM_KEY, DROP_KEY, FAIL_LOST_CLAIM, FINISH_RECORDED, KEEP_ANSWER, OPEN_RUN, RENEW_CLAIMS } from '../../../../src/runs/store/redis/redis-scripts.ts'
import { publishedOn, redisNow, scriptRedis, zsetOf } from '../../../helpers/redis-state.ts'
import { patient } from '../../../helpers/timing.ts'

// The Idempotency-Key scripts on hand-made key states: a slot claimed, held, answered or lost (by
// Redis's clock), the fencing that keeps a lost sidecar's claim from being renewed or answered
// over, and a recorded sync run's start and end.

const CLAIMS = 'as:{p/a}:claims'
const SLOT = 'as:{p/a}:key:k1'
const RUN = 'as:{p/a}:run:r1'
const EVENTS = 'as:{p/a}:events:r1'
const INDEX = 'as:{p/a}:runs'
const LIVE = 'as:{p/a}:live:r1'
const QUEUE = 'as:{p/a}:queue'
const LOST_AFTER_MS = 60_000

const record = (status: string): string => `{"run_id":"r1","status":"${status}","created_at":"2025-01-01T00:00:00.000Z"}`

t.test('the claim scripts', async t => {
  const redis = await scriptRedis(t)

  const claim = (fields: Partial<Parameters<typeof CLAIM_KEY.call>[1]> = {}): ReturnType<typeof CLAIM_KEY.call> => CLAIM_KEY.call(redis, {
    claims: CLAIMS, slot: SLOT, run: RUN, index: INDEX,
    runId: 'r1', digest: 'd1', async: '0', leaseMs: 30_000, record: record('running'), owner: 'sidecar-a', webhook: '',
    recordTtlSeconds: 3600, createdAtMs: 1_700_000_000_000, lostAfterMs: LOST_AFTER_MS, sub: 'alice', ...fields
  })
  /** A slot held by run r0 (sync, no answer), its sidecar's last beat `ago` ms before Redis's now. */
  const heldSlot = async (ago: number, fields: Record<string, string> = {}): Promise<void> => {
    await redis.hset(SLOT, { run: 'r0', digest: 'd0', async: '0', ...fields })
    await redis.zadd(CLAIMS, await redisNow(redis) - ago, SLOT)
  }

  t.test('CLAIM_KEY: an async submit claims a free slot as a lease, records nothing', async t => {
    t.same(await claim({ async: '1', record: '' }), { kind: 'claimed' })
    t.same(await redis.hgetall(SLOT), { run: 'r1', digest: 'd1', async: '1' })
    const ttl = await redis.pttl(SLOT)
    t.ok(ttl > 30_000 - patient(1000) && ttl <= 30_000, `the lease's ${ttl} ms`)
    t.equal(await redis.exists(RUN, CLAIMS), 0, 'no run, no claims set')
  })

  t.test('CLAIM_KEY: a sync call claims a free slot, held with its beat, and its run recorded running', async t => {
    const before = await redisNow(redis)
    t.same(await claim({ webhook: '{"url":"https://hook.example"}' }), { kind: 'claimed' })
    const after = await redisNow(redis)
    t.same(await redis.hgetall(SLOT), { run: 'r1', digest: 'd1', async: '0' })
    const slotTtl = await redis.ttl(SLOT)
    t.ok(slotTtl > 3590 && slotTtl <= 3600, `the slot for the record's ttl (${slotTtl} s), no lease`)
    const [[member, beat] = ['', 0]] = await zsetOf(redis, CLAIMS)
    t.equal(member, SLOT)
    t.ok(beat >= before && beat <= after, 'its beat is Redis\'s now')
    t.same(await redis.hgetall(RUN), { record: record('running'), async: '0', owner: 'sidecar-a', sub: 'alice', webhook: '{"url":"https://hook.example"}' }, 'the caller\'s sub beside the record')
    const runTtl = await redis.ttl(RUN)
    t.ok(runTtl > 3590 && runTtl <= 3600, `the run's ${runTtl} s`)
    t.same(await zsetOf(redis, `${INDEX}:running`), [['r1', 1_700_000_000_000]], 'in the running index at its created_at')
  })

  t.test('CLAIM_KEY: a sync call whose run id is taken claims nothing', async t => {
    await redis.hset(RUN, 'record', record('succeeded'))
    t.same(await claim(), { kind: 'run id taken' })
    t.equal(await redis.exists(SLOT, CLAIMS, `${INDEX}:running`), 0)
    t.same(await redis.hgetall(RUN), { record: record('succeeded') }, 'the run as it was')
  })

  t.test('CLAIM_KEY: a slot a live request holds answers what it holds, and changes nothing', async t => {
    await heldSlot(1000)
    const beats = await zsetOf(redis, CLAIMS)
    t.same(await claim(), { kind: 'held', entry: { runId: 'r0', digest: 'd0', async: false, answer: undefined } })
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0' })
    t.same(await zsetOf(redis, CLAIMS), beats)
    t.equal(await redis.exists(RUN), 0, 'no run recorded')
  })

  t.test('CLAIM_KEY: an answered slot answers its answer, however old its beat', async t => {
    await heldSlot(LOST_AFTER_MS + 10_000, { status: '201', type: 'application/json', body: '{"ok":true}' })
    t.same(await claim(), {
      kind: 'held',
      entry: { runId: 'r0', digest: 'd0', async: false, answer: { status: 201, contentType: 'application/json', body: Buffer.from('{"ok":true}') } }
    })
    await redis.hset(SLOT, 'type', '')
    const reply = await claim()
    t.equal(reply.kind === 'held' ? reply.entry.answer?.contentType : 'not held', undefined, 'an empty content type is none')
  })

  t.test('CLAIM_KEY: a slot whose sidecar has not beaten for `lost after` ms, by Redis\'s clock, is lost', async t => {
    await heldSlot(LOST_AFTER_MS + 1000)
    t.same(await claim(), { kind: 'lost', runId: 'r0' })
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0' }, 'nothing changed: FAIL_LOST_CLAIM ends it')
    await redis.zadd(CLAIMS, await redisNow(redis) - LOST_AFTER_MS + 5000, SLOT)
    t.equal((await claim()).kind, 'held', 'the same slot beaten within the window is held')
  })

  t.test('CLAIM_KEY: an async lease has no beat: held, never lost', async t => {
    await redis.hset(SLOT, { run: 'r0', digest: 'd0', async: '1' })
    t.same(await claim(), { kind: 'held', entry: { runId: 'r0', digest: 'd0', async: true, answer: undefined } })
  })

  t.test('CLAIM_KEY: calls of one turn run batched, each its own reply', async t => {
    const other = 'as:{p/a}:key:k2'
    await redis.hset(other, { run: 'r9', digest: 'd9', async: '1' })
    const replies = await Promise.all([
      claim({ async: '1', record: '' }),
      CLAIM_KEY.call(redis, {
        claims: CLAIMS, slot: other, run: 'as:{p/a}:run:r2', index: INDEX, runId: 'r2', digest: 'd2', async: '1', leaseMs: 1000,
        record: '', owner: 'sidecar-a', webhook: '', recordTtlSeconds: 60, createdAtMs: 0, lostAfterMs: LOST_AFTER_MS, sub: ''
      })
    ])
    t.same(replies, [{ kind: 'claimed' }, { kind: 'held', entry: { runId: 'r9', digest: 'd9', async: true, answer: undefined } }])
  })

  const failLost = (fields: Partial<Parameters<typeof FAIL_LOST_CLAIM.call>[1]> = {}): Promise<boolean> => FAIL_LOST_CLAIM.call(redis, {
    claims: CLAIMS, slot: SLOT, run: RUN, events: EVENTS, index: INDEX,
    runId: 'r0', record: record('failed'), result: '{"message":"replica lost"}', ttlSeconds: 600, liveChannel: LIVE,
    status: 502, contentType: 'application/json', body: '{"message":"replica lost"}', answerTtlMs: 600_000, lostAfterMs: LOST_AFTER_MS,
    owner: 'sidecar-b', indexCutoffMs: '', ...fields
  })
  const runningRun = async (): Promise<void> => {
    await redis.hset(RUN, { record: record('running'), async: '0', owner: 'sidecar-a', events: '2' })
    await redis.xadd(EVENTS, '0-1', 'd', 'x')
    await redis.zadd(`${INDEX}:running`, 1000, 'r0')
  }

  t.test('FAIL_LOST_CLAIM: a lost claim ends its run "replica lost", owned by the decider, and the slot keeps that answer', async t => {
    await heldSlot(LOST_AFTER_MS + 1000)
    await runningRun()
    const published = await publishedOn(redis, LIVE, async () => { t.equal(await failLost(), true) })
    t.same(published, ['done'])
    t.same(await redis.hgetall(RUN), {
      record: record('failed'), async: '0', owner: 'sidecar-b', events: '2', result: '{"message":"replica lost"}'
    })
    t.same(await zsetOf(redis, `${INDEX}:running`), [])
    t.same(await zsetOf(redis, `${INDEX}:failed`), [['r0', 1000]], 'moved to the failed index at its score')
    for (const key of [RUN, EVENTS]) {
      const ttl = await redis.ttl(key)
      t.ok(ttl > 590 && ttl <= 600, `${key} kept ${ttl} s`)
    }
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0', status: '502', type: 'application/json', body: '{"message":"replica lost"}' })
    const slotTtl = await redis.pttl(SLOT)
    t.ok(slotTtl > 590_000 && slotTtl <= 600_000)
    t.same(await zsetOf(redis, CLAIMS), [], 'the claim left the claims set')
  })

  t.test('FAIL_LOST_CLAIM refuses a claim renewed meanwhile, or one never in the claims set', async t => {
    await heldSlot(1000)
    await runningRun()
    const beats = await zsetOf(redis, CLAIMS)
    t.equal(await failLost(), false)
    t.same(await zsetOf(redis, CLAIMS), beats, 'still claimed')
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0' })
    t.equal(await redis.hget(RUN, 'record'), record('running'))
    await redis.del(CLAIMS)
    t.equal(await failLost(), false)
    t.equal(await redis.hget(RUN, 'record'), record('running'))
  })

  t.test('FAIL_LOST_CLAIM: a lost beat whose slot is another run\'s, or answered, only leaves the claims set', async t => {
    await heldSlot(LOST_AFTER_MS + 1000)
    await runningRun()
    t.equal(await failLost({ runId: 'r-other' }), false)
    t.same(await zsetOf(redis, CLAIMS), [], 'the stale beat goes')
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0' })
    t.equal(await redis.hget(RUN, 'record'), record('running'))
    await heldSlot(LOST_AFTER_MS + 1000, { status: '200', type: '', body: 'kept' })
    t.equal(await failLost(), false)
    t.equal(await redis.hget(SLOT, 'body'), 'kept', 'the answer kept stays')
  })

  t.test('FAIL_LOST_CLAIM: a run already ended, or no record given, keeps its record; the slot gets the answer', async t => {
    await heldSlot(LOST_AFTER_MS + 1000)
    await redis.hset(RUN, { record: record('succeeded'), owner: 'sidecar-a' })
    t.equal(await failLost(), true)
    t.same(await redis.hgetall(RUN), { record: record('succeeded'), owner: 'sidecar-a' })
    t.equal(await redis.ttl(RUN), -1)
    t.equal(await redis.hget(SLOT, 'status'), '502')
    await redis.del(SLOT)
    await heldSlot(LOST_AFTER_MS + 1000)
    await runningRun()
    t.equal(await failLost({ record: '' }), true)
    t.equal(await redis.hget(RUN, 'record'), record('running'))
    t.equal(await redis.hget(SLOT, 'status'), '502')
  })

  const keep = (fields: Partial<Parameters<typeof KEEP_ANSWER.call>[1]> = {}): Promise<boolean> => KEEP_ANSWER.call(redis, {
    slot: SLOT, claims: CLAIMS, runId: 'r0', status: 200, contentType: 'text/plain', body: 'hello', ttlMs: 120_000, ...fields
  })

  t.test('KEEP_ANSWER keeps the answer in the run\'s slot, for the ttl again, out of the claims set', async t => {
    await heldSlot(1000)
    t.equal(await keep(), true)
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0', status: '200', type: 'text/plain', body: 'hello' })
    const ttl = await redis.pttl(SLOT)
    t.ok(ttl > 120_000 - patient(1000) && ttl <= 120_000)
    t.same(await zsetOf(redis, CLAIMS), [])
  })

  t.test('KEEP_ANSWER refuses when an answer is kept (a claim taken for lost), or the slot is another run\'s, or gone', async t => {
    await heldSlot(1000, { status: '502', type: 'application/json', body: 'replica lost' })
    t.equal(await keep(), false)
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0', status: '502', type: 'application/json', body: 'replica lost' })
    t.equal(await redis.zcard(CLAIMS), 1, 'left as it was')
    await redis.del(SLOT)
    await heldSlot(1000)
    t.equal(await keep({ runId: 'r1' }), false)
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0' })
    await redis.del(SLOT)
    t.equal(await keep(), false)
    t.equal(await redis.exists(SLOT), 0, 'not made again')
  })

  const drop = (runId: string, forget: '0' | '1'): Promise<boolean> => DROP_KEY.call(redis, { slot: SLOT, run: RUN, claims: CLAIMS, runId, forget })

  t.test('DROP_KEY frees the run\'s slot; with forget, its sync run goes too, never an async one', async t => {
    await heldSlot(1000)
    await redis.hset(RUN, { record: record('running'), async: '0' })
    t.equal(await drop('r0', '0'), true)
    t.equal(await redis.exists(SLOT), 0)
    t.same(await zsetOf(redis, CLAIMS), [])
    t.equal(await redis.exists(RUN), 1, 'the run stays')
    await heldSlot(1000)
    t.equal(await drop('r0', '1'), true)
    t.equal(await redis.exists(SLOT, RUN), 0, 'slot and sync run gone')
    await heldSlot(1000)
    await redis.hset(RUN, { record: record('queued'), async: '1' })
    t.equal(await drop('r0', '1'), true)
    t.equal(await redis.exists(RUN), 1, 'an async run stays')
  })

  t.test('DROP_KEY refuses an answered slot and another run\'s', async t => {
    await heldSlot(1000, { status: '200', type: '', body: 'x' })
    t.equal(await drop('r0', '1'), false)
    t.equal(await redis.exists(SLOT), 1)
    t.equal(await redis.zcard(CLAIMS), 1)
    await redis.hdel(SLOT, 'status', 'type', 'body')
    t.equal(await drop('r-other', '1'), false)
    t.same(await redis.hgetall(SLOT), { run: 'r0', digest: 'd0', async: '0' })
  })

  t.test('RENEW_CLAIMS renews a sync claim\'s beat and an async lease, and reports the slots no longer this sidecar\'s', async t => {
    const slot = (name: string): string => `as:{p/a}:key:${name}`
    const old = await redisNow(redis) - 30_000
    await redis.hset(slot('sync'), { run: 'r-sync', digest: 'd', async: '0' })
    await redis.zadd(CLAIMS, old, slot('sync'))
    await redis.hset(slot('async'), { run: 'r-async', digest: 'd', async: '1' })
    await redis.pexpire(slot('async'), 1000)
    await redis.hset(slot('taken'), { run: 'r-other', digest: 'd', async: '0' })
    await redis.zadd(CLAIMS, old, slot('taken'))
    await redis.hset(slot('answered'), { run: 'r-answered', digest: 'd', async: '0', status: '200', type: '', body: '' })
    await redis.pexpire(slot('answered'), 5000)
    const before = await redisNow(redis)
    const lost = await RENEW_CLAIMS.call(redis, {
      claims: CLAIMS,
      slots: [slot('sync'), slot('async'), slot('taken'), slot('answered'), slot('gone')],
      runIds: ['r-sync', 'r-async', 'r-mine', 'r-answered', 'r-gone'],
      leaseMs: 90_000
    })
    t.same(lost, [slot('taken'), slot('answered'), slot('gone')])
    const beats = new Map(await zsetOf(redis, CLAIMS))
    t.ok((beats.get(slot('sync')) ?? 0) >= before, 'the sync claim\'s beat is now')
    t.equal(beats.get(slot('taken')), old, 'another\'s claim is left alone')
    t.notOk(beats.has(slot('async')), 'an async lease never joins the claims set')
    const lease = await redis.pttl(slot('async'))
    t.ok(lease > 90_000 - patient(1000) && lease <= 90_000, `the async lease is ${lease} ms again`)
    t.ok(await redis.pttl(slot('answered')) <= 5000, 'an answered slot keeps its ttl')
    t.same(await RENEW_CLAIMS.call(redis, { claims: CLAIMS, slots: [], runIds: [], leaseMs: 1 }), [], 'nothing to renew')
  })

  const open = (fields: Partial<Parameters<typeof OPEN_RUN.call>[1]> = {}): Promise<string | undefined> => OPEN_RUN.call(redis, {
    run: RUN, index: INDEX, queue: QUEUE, record: record('running'), owner: 'sidecar-a', webhook: '', ttlSeconds: 900, runId: 'r1', createdAtMs: 42,
    request: '', body: '', urgency: '', caller: '', sub: 'bob', ...fields
  })

  t.test('OPEN_RUN records a sync call running, owned and indexed, its queue entry in its sidecar\'s pending list; refuses a run id taken', async t => {
    const entry = await open()
    t.match(entry, /^\d+-\d+$/)
    t.same(await redis.hgetall(RUN), { record: record('running'), async: '0', owner: 'sidecar-a', sub: 'bob', entry, at: '42' })
    const ttl = await redis.ttl(RUN)
    t.ok(ttl > 890 && ttl <= 900)
    t.same(await zsetOf(redis, `${INDEX}:running`), [['r1', 42]])
    t.same(await redis.xrange(QUEUE, '-', '+'), [[entry, ['run', 'r1', 'turn', '1']]], 'an entry with its turn mark: no take adopts it')
    t.match(await redis.xpending(QUEUE, 'runners', '-', '+', 10), [[entry, 'sidecar-a', /./, 1]], 'held by its sidecar, as a run it took')
    await redis.hset(RUN, 'owner', 'sidecar-b')
    t.equal(await open(), undefined)
    t.equal(await redis.hget(RUN, 'owner'), 'sidecar-b', 'the run taken stays as it was')
    t.equal(await redis.xlen(QUEUE), 1, 'no entry for a run refused')
    await redis.del(RUN, QUEUE, `${INDEX}:running`)
  })

  t.test('OPEN_RUN, attempts counted: its request, body, webhook and turn kept for a next attempt', async t => {
    const webhook = '{"url":"https://hook.example/","secret":"s"}'
    const entry = await open({ request: '{"method":"POST"}', body: Buffer.from('in'), urgency: '1', caller: 'alice', webhook })
    t.same(await redis.hgetall(RUN), {
      record: record('running'), async: '0', owner: 'sidecar-a', sub: 'bob', webhook, entry, at: '42', request: '{"method":"POST"}', body: 'in', urgency: '1', caller: 'alice'
    })
    await redis.del(RUN, QUEUE, `${INDEX}:running`)
  })

  const finish = (fields: Partial<Parameters<typeof FINISH_RECORDED.call>[1]> = {}): Promise<boolean> => FINISH_RECORDED.call(redis, {
    claims: CLAIMS, index: INDEX, run: RUN, events: EVENTS, slot: SLOT,
    owner: 'sidecar-a', newRecord: record('succeeded'), result: '{"ok":true}', ttlSeconds: 300, liveChannel: LIVE, runId: 'r1',
    status: 200, contentType: 'application/json', body: '{"ok":true}', answerTtlMs: 300_000, indexCutoffMs: 5000, ...fields
  })
  const recordedRun = async (): Promise<void> => {
    await redis.hset(RUN, { record: record('running'), async: '0', owner: 'sidecar-a', events: '1' })
    await redis.xadd(EVENTS, '0-1', 'd', 'x')
    await redis.zadd(`${INDEX}:running`, 9000, 'r1')
    await redis.zadd(`${INDEX}:succeeded`, 1000, 'r-expired', 6000, 'r-recent')
    await redis.hset(SLOT, { run: 'r1', digest: 'd1', async: '0' })
    await redis.zadd(CLAIMS, 1, SLOT)
  }

  t.test('FINISH_RECORDED ends its owner\'s running run and keeps its answer in the slot', async t => {
    await recordedRun()
    const published = await publishedOn(redis, LIVE, async () => { t.equal(await finish(), true) })
    t.same(published, ['done'])
    t.same(await redis.hgetall(RUN), { record: record('succeeded'), async: '0', owner: 'sidecar-a', events: '1', result: '{"ok":true}' })
    t.same(await zsetOf(redis, `${INDEX}:running`), [])
    t.same(await zsetOf(redis, `${INDEX}:succeeded`), [['r-recent', 6000], ['r1', 9000]], 'moved, and the index trimmed before the cutoff')
    for (const key of [RUN, EVENTS]) {
      const ttl = await redis.ttl(key)
      t.ok(ttl > 290 && ttl <= 300, `${key} kept ${ttl} s`)
    }
    t.same(await redis.hgetall(SLOT), { run: 'r1', digest: 'd1', async: '0', status: '200', type: 'application/json', body: '{"ok":true}' })
    t.ok(await redis.pttl(SLOT) > 290_000)
    t.same(await zsetOf(redis, CLAIMS), [])
  })

  t.test('FINISH_RECORDED refuses a run another sidecar owns (taken for lost) or one not running', async t => {
    await recordedRun()
    await redis.hset(RUN, 'owner', 'sidecar-b')
    t.equal(await finish(), false)
    t.equal(await redis.hget(RUN, 'record'), record('running'))
    t.equal(await redis.hexists(SLOT, 'status'), 0)
    t.same(await zsetOf(redis, `${INDEX}:running`), [['r1', 9000]])
    t.equal(await redis.zcard(CLAIMS), 1)
    await redis.hset(RUN, { owner: 'sidecar-a', record: record('failed') })
    t.equal(await finish(), false)
    t.equal(await redis.hget(RUN, 'record'), record('failed'))
    await redis.del(RUN)
    t.equal(await finish(), false, 'a run gone')
    t.equal(await redis.exists(RUN), 0)
  })

  t.test('FINISH_RECORDED: a slot that is no longer the run\'s keeps what it holds; ends of one turn run batched', async t => {
    await recordedRun()
    await redis.hset(SLOT, 'run', 'r-other')
    const other = 'as:{p/a}:run:r2'
    await redis.hset(other, { record: record('running'), owner: 'sidecar-b' })
    const ends = await Promise.all([finish(), finish({ run: other, owner: 'sidecar-a', runId: 'r2' })])
    t.same(ends, [true, false], 'each its own reply')
    t.equal(await redis.hget(RUN, 'record'), record('succeeded'))
    t.same(await redis.hgetall(SLOT), { run: 'r-other', digest: 'd1', async: '0' })
    t.equal(await redis.zcard(CLAIMS), 1, 'still claimed by its own run')
  })
})
