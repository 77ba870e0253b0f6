import t from 'tap'
import { DELIVERY_DONE, FORGET_CONSUMERS, HOLD_DELIVERY, SENDERS } from '../../../../src/runs/store/redis/redis-scripts.ts'
import { pendingOf, scriptRedis, streamOf } from '../../../helpers/redis-state.ts'

// Webhook deliveries on hand-made key states: written down and held by their sidecar in one step
// (its group made if missing), ended with nothing left, and consumers forgotten only empty-handed.

const STREAM = 'as:{p/a}:deliveries'
const hash = (id: string): string => `as:{p/a}:delivery:${id}`

t.test('the delivery scripts', async t => {
  const redis = await scriptRedis(t)

  const hold = (id: string, fields: Partial<Parameters<typeof HOLD_DELIVERY.call>[1]> = {}): Promise<string> => HOLD_DELIVERY.call(redis, {
    deliveriesStream: STREAM, deliveryHash: hash(id),
    runId: 'r1', url: 'https://hook.example/in', body: '{"run_id":"r1"}', secret: '', consumer: 'sidecar-a', ttlSeconds: 86_400,
    deliveryId: id, traceparent: '', tracestate: '', ...fields
  })

  t.test('HOLD_DELIVERY writes the delivery down, held in its sidecar\'s pending list (group SENDERS), its first attempt counted', async t => {
    const entry = await hold('d1')
    t.match(entry, /^\d+-\d+$/)
    t.same(await streamOf(redis, STREAM), [[entry, { delivery: 'd1' }]])
    t.same(await pendingOf(redis, STREAM, SENDERS), [[entry, 'sidecar-a', 1]], 'held by its sidecar, read by nobody')
    t.same(await redis.hgetall(hash('d1')), { run: 'r1', url: 'https://hook.example/in', body: '{"run_id":"r1"}', attempts: '1', entry })
    const ttl = await redis.ttl(hash('d1'))
    t.ok(ttl > 86_390 && ttl <= 86_400)
  })

  t.test('HOLD_DELIVERY keeps a secret and a trace context when given', async t => {
    const entry = await hold('d2', { secret: 'whsec', traceparent: '00-abc-def-01', tracestate: 'k=v' })
    t.same(await redis.hgetall(hash('d2')), {
      run: 'r1', url: 'https://hook.example/in', body: '{"run_id":"r1"}', attempts: '1', entry, secret: 'whsec', traceparent: '00-abc-def-01', tracestate: 'k=v'
    })
  })

  t.test('HOLD_DELIVERY makes the group again on a stream that lost it', async t => {
    const first = await hold('d1')
    await redis.xgroup('DESTROY', STREAM, SENDERS)
    const second = await hold('d2')
    t.same(await pendingOf(redis, STREAM, SENDERS), [[second, 'sidecar-a', 1]], 'the group made again: the later entry held')
    t.same((await streamOf(redis, STREAM)).map(([id]) => id), [first, second])
  })

  t.test('HOLD_DELIVERY: holds of one turn run batched, each its own entry', async t => {
    const entries = await Promise.all([hold('d1'), hold('d2', { consumer: 'sidecar-b' })])
    t.equal(new Set(entries).size, 2)
    t.same(await pendingOf(redis, STREAM, SENDERS), [[entries[0], 'sidecar-a', 1], [entries[1], 'sidecar-b', 1]])
  })

  const done = (id: string, entryId: string): Promise<boolean> => DELIVERY_DONE.call(redis, { deliveriesStream: STREAM, deliveryHash: hash(id), entryId })

  t.test('DELIVERY_DONE acknowledges and deletes the entry, and its hash (secret and all) goes', async t => {
    const entry = await hold('d1', { secret: 'whsec' })
    const other = await hold('d2')
    t.equal(await done('d1', entry), true)
    t.same(await streamOf(redis, STREAM), [[other, { delivery: 'd2' }]])
    t.same(await pendingOf(redis, STREAM, SENDERS), [[other, 'sidecar-a', 1]])
    t.equal(await redis.exists(hash('d1')), 0)
    t.equal(await done('d1', entry), false, 'again: nothing left to end')
  })

  const forget = (consumer: string, idleMs: number): Promise<number> => FORGET_CONSUMERS.call(redis, { stream: STREAM, group: SENDERS, consumer, idleMs })
  const consumers = async (): Promise<string[]> => {
    const infos = await redis.call('XINFO', 'CONSUMERS', STREAM, SENDERS) as string[][]
    return infos.map(info => info[info.indexOf('name') + 1] as string).sort()
  }

  t.test('FORGET_CONSUMERS removes the one named, only when it holds nothing', async t => {
    const entry = await hold('d1')
    await redis.xgroup('CREATECONSUMER', STREAM, SENDERS, 'sidecar-b')
    t.equal(await forget('sidecar-a', 0), 0, 'it holds an entry: kept (deleting it would lose the entry)')
    t.equal(await forget('sidecar-b', 0), 1)
    t.same(await consumers(), ['sidecar-a'])
    await done('d1', entry)
    t.equal(await forget('sidecar-a', 0), 1)
    t.same(await consumers(), [])
  })

  t.test('FORGET_CONSUMERS with no name removes those idle longer than asked that hold nothing', async t => {
    await hold('d1')
    await redis.xgroup('CREATECONSUMER', STREAM, SENDERS, 'sidecar-b')
    await redis.xgroup('CREATECONSUMER', STREAM, SENDERS, 'sidecar-c')
    t.equal(await forget('', 3_600_000), 0, 'none idle an hour')
    t.same(await consumers(), ['sidecar-a', 'sidecar-b', 'sidecar-c'])
    t.equal(await forget('', -1), 2, 'every empty-handed one is idle longer than -1 ms')
    t.same(await consumers(), ['sidecar-a'])
  })

  t.test('FORGET_CONSUMERS: no stream, or no group, is nothing to forget', async t => {
    t.equal(await forget('sidecar-a', 0), 0)
    await redis.xadd(STREAM, '*', 'delivery', 'd1')
    t.equal(await forget('', -1), 0)
    t.equal(await redis.xlen(STREAM), 1)
  })
})
