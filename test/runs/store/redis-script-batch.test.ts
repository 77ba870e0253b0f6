import { Redis } from 'ioredis'
import t from 'tap'
import { BatchedScript } from '../../../src/runs/store/redis/redis-script-batch.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'

// A script's calls made in one turn of the event loop run as one EVALSHA (the run store's
// key claims, recorded ends and webhook deliveries): each call gets the reply it would get alone,
// in the order the calls came.

const SOURCE = `
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if ARGV[2] == 'nothing' then return nil end
if ARGV[2] == 'array' then return { n, ARGV[2] } end
if ARGV[2] == 'fail' then return redis.call('HGET', KEYS[1], 'x') end
return n
`

t.test('batched script calls', async t => {
  const server = await startPrivateRedis(t)
  const redis = new Redis(server.url)
  t.teardown(() => { redis.disconnect() })
  const script = new BatchedScript(SOURCE, { shared: 0, own: 1, args: 2 })
  for (const loaded of script.scripts) await loaded.load(redis)
  const evalshas = async (): Promise<number> => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0)

  t.test('calls of one turn: one EVALSHA, each its own reply, in order', async t => {
    const before = await evalshas()
    const replies = await Promise.all([
      script.run(redis, ['{a}:n'], [1, '']),
      script.run(redis, ['{a}:n'], [2, 'nothing']),
      script.run(redis, ['{a}:n'], [3, 'array']),
      script.run(redis, ['{a}:m'], [10, ''])
    ])
    t.same(replies, [1, null, [6, 'array'], 10])
    t.equal(await evalshas() - before, 1, 'one EVALSHA for the four')
  })

  t.test('a call alone runs the plain script; calls of other hash tags run apart', async t => {
    const before = await evalshas()
    t.equal(await script.run(redis, ['{b}:n'], [5, '']), 5)
    t.equal(await evalshas() - before, 1)
    const apart = await Promise.all([script.run(redis, ['{b}:n'], [1, '']), script.run(redis, ['{c}:n'], [1, '']), script.run(redis, ['{b}:n'], [1, ''])])
    t.same(apart, [6, 1, 7])
    t.equal(await evalshas() - before, 3, 'one batch for {b}, the plain script for {c}')
  })

  t.test('more calls than a batch holds: batches of 64, replies still in order', async t => {
    const before = await evalshas()
    const replies = await Promise.all(Array.from({ length: 130 }, async () => await script.run(redis, ['{d}:n'], [1, ''])))
    t.same(replies, Array.from({ length: 130 }, (_v, i) => i + 1))
    t.equal(await evalshas() - before, 3, '64 + 64 + 2')
  })

  t.test('an error reply fails every call of its batch, as each would alone', async t => {
    await redis.hset('{e}:hash', 'x', '1')
    const calls = [script.run(redis, ['{e}:n'], [1, '']), script.run(redis, ['{e}:hash'], [1, 'fail'])]
    const settled = await Promise.allSettled(calls)
    t.same(settled.map(s => s.status), ['rejected', 'rejected'])
    t.match(String((settled[1] as PromiseRejectedResult).reason), /WRONGTYPE/)
    t.equal((settled[0] as PromiseRejectedResult).reason, (settled[1] as PromiseRejectedResult).reason, 'the same error for both')
  })

  t.test('a call of the wrong shape is a TypeError', async t => {
    await t.rejects(script.run(redis, ['{f}:n', '{f}:m'], [1, '']), TypeError)
    await t.rejects(script.run(redis, ['{f}:n'], [1]), TypeError)
  })

  t.test('a server that lost its scripts (SCRIPT FLUSH): the batch is sent with EVAL', async t => {
    await redis.script('FLUSH')
    const replies = await Promise.all([script.run(redis, ['{g}:n'], [1, '']), script.run(redis, ['{g}:n'], [1, ''])])
    t.same(replies, [1, 2])
  })
})
