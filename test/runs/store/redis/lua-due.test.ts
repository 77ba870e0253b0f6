import t from 'tap'
import { LEASE_BEAT, LEAVE_DELIVERY, LOOK_DUE, LOST_CLAIMS } from '../../../../src/runs/store/redis/redis-due-scripts.ts'
import { HOLD_DELIVERY, SENDERS } from '../../../../src/runs/store/redis/redis-scripts.ts'
import { redisNow, scriptRedis, zsetOf } from '../../../helpers/redis-state.ts'

// The app's due set on hand-made key states, every time by Redis's clock: a sidecar's lease, a
// look at what is due, a delivery left for another, and the claims of lost sidecars.

const DUE = 'as:{p/a}:expiry'
const QUEUED = 'as:{p/a}:runs:queued'
const TTL_MS = 86_400_000
const CLAIMS = 'as:{p/a}:claims'
const STREAM = 'as:{p/a}:deliveries'
const LOST_AFTER_MS = 60_000

t.test('the due set\'s scripts', async t => {
  const redis = await scriptRedis(t)

  t.test('LEASE_BEAT puts the lease `lost after` ms past Redis\'s now, and moves it at each beat', async t => {
    const before = await redisNow(redis)
    t.equal(await LEASE_BEAT.call(redis, { dueSet: DUE, member: 'lease:sidecar-a', lostAfterMs: LOST_AFTER_MS }), true)
    const after = await redisNow(redis)
    const [[member, at] = ['', 0]] = await zsetOf(redis, DUE)
    t.equal(member, 'lease:sidecar-a')
    t.ok(at >= before + LOST_AFTER_MS && at <= after + LOST_AFTER_MS, 'due a lost window after now')
    t.equal(await LEASE_BEAT.call(redis, { dueSet: DUE, member: 'lease:sidecar-a', lostAfterMs: 2 * LOST_AFTER_MS }), false, 'moved, not added')
    const [[, moved] = ['', 0]] = await zsetOf(redis, DUE)
    t.ok(moved >= before + 2 * LOST_AFTER_MS, 'to the new time')
  })

  t.test('LOOK_DUE: Redis\'s now, the members due by it in order, and the first one after them', async t => {
    const now = await redisNow(redis)
    await redis.zadd(DUE, 0, 'left:1-0', now - 1000, 'r1', now - 10, 'lease:sidecar-b', now + 3_600_000, 'r2', now + 7_200_000, 'gone:sidecar-c')
    const look = await LOOK_DUE.call(redis, { dueSet: DUE, queuedIndex: QUEUED, count: 10, queueTtlMs: TTL_MS })
    t.ok(look.now >= now && look.now < now + 10_000, 'Redis\'s clock')
    t.same(look.due, ['left:1-0', 'r1', 'lease:sidecar-b'])
    t.same(look.next, { member: 'r2', at: now + 3_600_000 })
    t.equal(look.queuedAt, undefined, 'no run queued')
    t.equal((await zsetOf(redis, DUE)).length, 5, 'a look removes nothing')
  })

  t.test('LOOK_DUE: queued runs submitted longer than the TTL ago are due (after the due set\'s), at most `count`; then when the next reaches it', async t => {
    const now = await redisNow(redis)
    await redis.zadd(DUE, now - 5, 'r-deadline')
    await redis.zadd(QUEUED, now - TTL_MS - 2000, 'q-old', now - TTL_MS - 1000, 'q-older-than-ttl', now - TTL_MS + 60_000, 'q-young', now, 'q-new')
    const look = await LOOK_DUE.call(redis, { dueSet: DUE, queuedIndex: QUEUED, count: 10, queueTtlMs: TTL_MS })
    t.same(look.due, ['r-deadline', 'q-old', 'q-older-than-ttl'], 'the due set\'s, then the queued runs past the TTL, oldest first')
    t.equal(look.queuedAt, now + 60_000, 'the next queued run reaches the TTL then')
    const one = await LOOK_DUE.call(redis, { dueSet: DUE, queuedIndex: QUEUED, count: 1, queueTtlMs: TTL_MS })
    t.same([one.due, one.queuedAt], [['r-deadline', 'q-old'], now - 1000], 'one of each; the next queued one is due already')
    t.equal((await zsetOf(redis, QUEUED)).length, 4, 'a look removes nothing')
  })

  t.test('LOOK_DUE: at most `count` due; the next is the first one not returned', async t => {
    const now = await redisNow(redis)
    await redis.zadd(DUE, 1, 'a', 2, 'b', now + 3_600_000, 'c')
    const look = await LOOK_DUE.call(redis, { dueSet: DUE, queuedIndex: QUEUED, count: 1, queueTtlMs: TTL_MS })
    t.same([look.due, look.next], [['a'], { member: 'b', at: 2 }])
  })

  t.test('LOOK_DUE: an empty set, or nothing after the due ones', async t => {
    const empty = await LOOK_DUE.call(redis, { dueSet: DUE, queuedIndex: QUEUED, count: 10, queueTtlMs: TTL_MS })
    t.same([empty.due, empty.next], [[], undefined])
    await redis.zadd(DUE, 5, 'r1')
    const all = await LOOK_DUE.call(redis, { dueSet: DUE, queuedIndex: QUEUED, count: 10, queueTtlMs: TTL_MS })
    t.same([all.due, all.next], [['r1'], undefined])
  })

  t.test('LEAVE_DELIVERY makes its entry as idle as a lost sidecar\'s, and due at once', async t => {
    const entry = await HOLD_DELIVERY.call(redis, {
      deliveriesStream: STREAM, deliveryHash: 'as:{p/a}:delivery:d1', runId: 'r1', url: 'https://hook.example', body: '{}', secret: '',
      consumer: 'sidecar-a', ttlSeconds: 60, deliveryId: 'd1', traceparent: '', tracestate: ''
    })
    const leave = async (): Promise<boolean> => await LEAVE_DELIVERY.call(redis, {
      deliveriesStream: STREAM, dueSet: DUE, group: SENDERS, consumer: 'sidecar-a', entry, idleMs: LOST_AFTER_MS + 1, member: `left:${entry}`
    })
    t.equal(await leave(), true)
    const pending = await redis.call('XPENDING', STREAM, SENDERS, 'IDLE', LOST_AFTER_MS, '-', '+', 10) as Array<[string, string, number, number]>
    t.same(pending.map(([id, consumer]) => [id, consumer]), [[entry, 'sidecar-a']], 'idle past the lost window, still its consumer\'s')
    t.same(await zsetOf(redis, DUE), [[`left:${entry}`, 0]])
    t.equal(await leave(), false, 'left again: due already')
  })

  t.test('LOST_CLAIMS: the claims not beaten for `lost after` ms; a claim whose slot expired leaves the set', async t => {
    const now = await redisNow(redis)
    const slot = (name: string): string => `as:{p/a}:key:${name}`
    await redis.hset(slot('lost'), 'run', 'r-lost')
    await redis.hset(slot('live'), 'run', 'r-live')
    await redis.zadd(CLAIMS, now - LOST_AFTER_MS - 1000, slot('lost'), now - LOST_AFTER_MS - 500, slot('expired'), now - 1000, slot('live'))
    t.same(await LOST_CLAIMS.call(redis, { claims: CLAIMS, lostAfterMs: LOST_AFTER_MS }), [{ slot: slot('lost'), runId: 'r-lost' }])
    t.same((await zsetOf(redis, CLAIMS)).map(([member]) => member), [slot('lost'), slot('live')], 'the lost one stays: FAIL_LOST_CLAIM ends it')
  })

  t.test('LOST_CLAIMS: at most 16 a call', async t => {
    const now = await redisNow(redis)
    for (let i = 0; i < 20; i++) {
      const slot = `as:{p/a}:key:k${String(i).padStart(2, '0')}`
      await redis.hset(slot, 'run', `r${i}`)
      await redis.zadd(CLAIMS, now - LOST_AFTER_MS - 1000 + i, slot)
    }
    const lost = await LOST_CLAIMS.call(redis, { claims: CLAIMS, lostAfterMs: LOST_AFTER_MS })
    t.equal(lost.length, 16)
    t.same(lost[0], { slot: 'as:{p/a}:key:k00', runId: 'r0' }, 'the longest silent first')
  })
})
