import { createHash } from 'node:crypto'
import fc from 'fast-check'
import t from 'tap'
import { MalformedRequestError } from '../../src/errors.ts'
import { idempotencyKey, idempotencySlot, requestDigest } from '../../src/runs/idempotency-key.ts'

const MALFORMED = 'malformed Idempotency-Key: 1 to 255 visible ASCII characters, sent once'
const scope = { projectId: 'proj', appName: 'app' }

t.test('Idempotency-Key: absent is undefined; 1 to 255 visible ASCII characters are kept as sent', async t => {
  t.equal(idempotencyKey(undefined), undefined)
  t.equal(idempotencyKey('a'), 'a')
  t.equal(idempotencyKey('!~'), '!~', 'the first and last visible characters')
  t.equal(idempotencyKey('k'.repeat(255)), 'k'.repeat(255), '255 characters')
  fc.assert(fc.property(fc.stringMatching(/^[\x21-\x7e]{1,255}$/), key => idempotencyKey(key) === key))
})

t.test('Idempotency-Key: empty, too long, a space, a control or non-ASCII character, or sent twice: 400', async t => {
  const refused = ['', 'k'.repeat(256), 'a b', ' a', 'a\t', 'a\x7f', 'a\x00', 'é', 'a, b']
  for (const key of refused) {
    t.throws(() => idempotencyKey(key), new MalformedRequestError(MALFORMED), JSON.stringify(key))
  }
  t.throws(() => idempotencyKey(['a', 'b']), new MalformedRequestError(MALFORMED), 'a list')
  t.equal(new MalformedRequestError(MALFORMED).status, 400)
  fc.assert(fc.property(fc.string({ minLength: 1, maxLength: 20 }).filter(key => /[^\x21-\x7e]/.test(key)), key => {
    try { idempotencyKey(key) } catch (error) { return error instanceof MalformedRequestError }
    return false
  }))
})

t.test('request digest: SHA-256 of the query (length first) and the body bytes; no body is the empty body; any byte of either differs', async t => {
  t.equal(requestDigest('', Buffer.from('{"a":1}')), createHash('sha256').update('0:\n{"a":1}').digest('base64url'))
  t.equal(requestDigest('user=alice', null), requestDigest('user=alice', Buffer.alloc(0)))
  t.not(requestDigest('user=alice', null), requestDigest('user=bob', null), 'another query')
  t.not(requestDigest('a', Buffer.from('b')), requestDigest('', Buffer.from('1:a\nb')), 'a query never runs into the body')
  fc.assert(fc.property(fc.string({ maxLength: 20 }), fc.uint8Array({ minLength: 1, maxLength: 64 }), fc.nat(), (query, bytes, at) => {
    const body = Buffer.from(bytes)
    const changed = Buffer.from(bytes)
    const i = at % changed.length
    changed[i] = ((changed[i] as number) + 1) & 0xff
    return requestDigest(query, body) === requestDigest(query, Buffer.from(bytes)) && requestDigest(query, body) !== requestDigest(query, changed) &&
      requestDigest(query, body) !== requestDigest(query + '&', body)
  }))
})

t.test('slots: one per project, app, path, caller and key, of fixed length; no two of them alike', async t => {
  const slot = idempotencySlot(scope, '/run', 'alice', 'key-1')
  t.match(slot, /^[A-Za-z0-9_-]{43}$/)
  t.equal(idempotencySlot(scope, '/run', 'alice', 'key-1'), slot, 'the same each time')
  const others = [
    idempotencySlot({ projectId: 'other', appName: 'app' }, '/run', 'alice', 'key-1'),
    idempotencySlot({ projectId: 'proj', appName: 'other' }, '/run', 'alice', 'key-1'),
    idempotencySlot(scope, '/other', 'alice', 'key-1'),
    idempotencySlot(scope, '/run', 'bob', 'key-1'),
    idempotencySlot(scope, '/run', '', 'key-1'),
    idempotencySlot(scope, '/run', 'alice', 'key-2'),
    idempotencySlot(scope, '/run\nalice', '', 'key-1')
  ]
  t.equal(new Set([slot, ...others]).size, 8, 'every part of the slot counts, and no part runs into the next')
  t.equal(idempotencySlot(scope, '/run', 's'.repeat(1000), 'k'.repeat(255)).length, 43, 'a long key and caller, a short slot')
})
