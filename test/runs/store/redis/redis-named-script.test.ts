import { Redis } from 'ioredis'
import t from 'tap'
import { luaSource } from '../../../../src/runs/store/redis/redis-lua-file.ts'
import { codeReply, defineScript, luaFileOf, NamedScript, textReply, textsReply } from '../../../../src/runs/store/redis/redis-named-script.ts'
import { CLAIM_KEY, FORGET_CONSUMERS, HOLD_DELIVERY, KEEP_ANSWER, RENEW_CLAIMS } from '../../../../src/runs/store/redis/redis-scripts.ts'
import { startPrivateRedis } from '../../../helpers/redis-server.ts'

// A script is called with named fields, built into KEYS and ARGV in its header's order; its reply
// is read into a type, and a reply it never gives is an error, not a guess.

t.test('named fields become KEYS and ARGV in the order the definition names them', async t => {
  t.same(KEEP_ANSWER.build({ ttlMs: 5000, body: 'b', contentType: 'text/plain', status: 200, runId: 'r1', claims: 'c', slot: 's' }), {
    keys: ['s', 'c'],
    args: ['r1', 200, 'text/plain', 'b', 5000]
  })
})

t.test('a `name...` field is a list, spread in its place', async t => {
  t.same(RENEW_CLAIMS.build({ claims: 'c', slots: ['s1', 's2'], runIds: ['r1', 'r2'], leaseMs: 9 }), {
    keys: ['c', 's1', 's2'],
    args: ['r1', 'r2', 9]
  })
  t.same(RENEW_CLAIMS.build({ claims: 'c', slots: [], runIds: [], leaseMs: 9 }), { keys: ['c'], args: [9] })
})

t.test('a field missing at run time is an error, not an undefined argument', async t => {
  const fields = { slot: 's', claims: 'c', runId: 'r', status: 200, contentType: '', body: 'b' } as unknown as Parameters<typeof KEEP_ANSWER.build>[0]
  t.throws(() => KEEP_ANSWER.build(fields), /KEEP_ANSWER: no ttlMs/)
})

t.test('a definition is refused when a name is used twice, or a batched script takes a list', async t => {
  t.throws(() => defineScript({ name: 'KEEP_ANSWER', keys: ['slot'], args: ['slot'], reply: () => 0 }), /a field named twice/)
  t.throws(() => defineScript({ name: 'RENEW_CLAIMS', keys: ['claims', 'slots...'], args: ['leaseMs'], reply: () => 0, batch: { shared: 1 } }),
    /a batched script takes no list/)
})

t.test('a script is its lua/ file, with its includes expanded once', async t => {
  t.equal(luaFileOf('FAIL_LOST_CLAIM'), 'fail-lost-claim.lua')
  t.ok(CLAIM_KEY instanceof NamedScript)
  t.equal(CLAIM_KEY.file, 'claim-key.lua')
  t.notMatch(CLAIM_KEY.source, /--#include/, 'no include line is left')
  t.equal(CLAIM_KEY.source.split('local function indexRun ').length, 2, 'run-index.lua once, though two files include it')
  t.equal(CLAIM_KEY.source.split('local clock = ').length, 2, 'now.lua once')
  t.equal(luaSource('now.lua'), luaSource('now.lua'), 'read the same each time')
  t.ok(luaSource('keep-answer.lua').endsWith('\n'), 'a script ends its line')
  t.equal(CLAIM_KEY.scripts.length, 2, 'a batched script: the plain one and the batch')
  t.equal(KEEP_ANSWER.scripts.length, 1)
})

t.test('replies are read into their types; one a script never gives throws', async t => {
  t.equal(KEEP_ANSWER.parse(1), true)
  t.equal(KEEP_ANSWER.parse(0), false)
  t.throws(() => KEEP_ANSWER.parse(2), /KEEP_ANSWER: unexpected reply 2/)
  t.throws(() => KEEP_ANSWER.parse('1'), /unexpected reply "1"/)
  t.equal(codeReply('X', -1, [1, -1]), -1)
  t.equal(textReply('X', Buffer.from('é')), 'é')
  t.throws(() => textReply('X', 1), /X: unexpected reply 1/)
  t.same(textsReply('X', ['a', Buffer.from('b')]), ['a', 'b'])
  t.throws(() => textsReply('X', 'a'), /unexpected reply "a"/)
  t.throws(() => RENEW_CLAIMS.parse(null), /RENEW_CLAIMS: unexpected reply null/)
  t.equal(FORGET_CONSUMERS.parse(2), 2)
  t.throws(() => FORGET_CONSUMERS.parse(1.5), /FORGET_CONSUMERS: unexpected reply 1.5/)
})

t.test('a definition with `buffers` gets bulk replies as Buffers (runBuffer), alone as batched', async t => {
  const server = await startPrivateRedis(t)
  const redis = new Redis(server.url, { protocol: 3 })
  t.teardown(() => { redis.disconnect() })
  const fields = {
    deliveriesStream: '{a}:deliveries', deliveryHash: '{a}:delivery:d1', runId: 'r1', url: 'https://hook.example', body: '{}', secret: '',
    consumer: 'sidecar-a', ttlSeconds: 60, deliveryId: 'd1', traceparent: '', tracestate: ''
  }
  const asBuffers = defineScript({ name: 'HOLD_DELIVERY', keys: HOLD_DELIVERY.keys, args: HOLD_DELIVERY.args, buffers: true, reply: reply => reply })
  const entry = await asBuffers.call(redis, fields)
  t.ok(Buffer.isBuffer(entry), 'a Buffer')
  t.match(String(entry), /^\d+-\d+$/)
  t.equal(typeof await HOLD_DELIVERY.call(redis, fields), 'string', 'without: text')
})

t.test('CLAIM_KEY reads every reply it gives, and only those', async t => {
  t.same(CLAIM_KEY.parse(null), { kind: 'claimed' })
  t.same(CLAIM_KEY.parse(-1), { kind: 'run id taken' })
  t.same(CLAIM_KEY.parse([Buffer.from('lost'), Buffer.from('r1')]), { kind: 'lost', runId: 'r1' })
  t.same(CLAIM_KEY.parse([Buffer.from('r1'), Buffer.from('d'), Buffer.from('1'), null, null, null]),
    { kind: 'held', entry: { runId: 'r1', digest: 'd', async: true, answer: undefined } })
  t.same(CLAIM_KEY.parse([Buffer.from('r1'), Buffer.from('d'), Buffer.from('0'), Buffer.from('201'), Buffer.from(''), Buffer.from('ok')]),
    { kind: 'held', entry: { runId: 'r1', digest: 'd', async: false, answer: { status: 201, contentType: undefined, body: Buffer.from('ok') } } })
  t.throws(() => CLAIM_KEY.parse([Buffer.from('r1')]), /CLAIM_KEY: unexpected reply/)
  t.throws(() => CLAIM_KEY.parse(1), /CLAIM_KEY: unexpected reply 1/)
})
