import { createHmac } from 'node:crypto'
import t from 'tap'
import { verifyWebhook, type VerifyWebhookOptions } from '../../src/index.ts'
import { signatureHeaderNames, signWebhook } from '../../src/webhook/webhook-signature.ts'
import { pythonSignature } from './webhook-kit.ts'

const SECRET = 'whsec_0123456789abcdef'
const RUN_ID = 'run_ABC-123'
const BODY = '{"run_id":"run_ABC-123","status_code":200,"result":{"greeting":"héllo ✓"},"run_time_ms":1.5,"timestamp":"2025-01-01T00:00:00.000Z"}'

const now = (): number => Math.floor(Date.now() / 1000)

/** HMAC computed here with node:crypto directly (not through signWebhook). */
function hex (secret: string, runId: string, timestamp: string, body: string | Buffer): string {
  return createHmac('sha256', secret).update(Buffer.concat([Buffer.from(`${runId}.${timestamp}.`), Buffer.from(body)])).digest('hex')
}

/** Headers as Node would give them for a genuine delivery. */
function genuine (options: { brand?: string, timestamp?: number, runId?: string, body?: string | Buffer, secret?: string } = {}): Record<string, string> {
  const brand = (options.brand ?? 'service').toLowerCase()
  const timestamp = String(options.timestamp ?? now())
  const runId = options.runId ?? RUN_ID
  return {
    'content-type': 'application/json',
    'x-request-id': runId,
    [`x-${brand}-webhook-timestamp`]: timestamp,
    [`x-${brand}-webhook-signature`]: `v1,${hex(options.secret ?? SECRET, runId, timestamp, options.body ?? BODY)}`
  }
}

t.test('signWebhook: v1,<lowercase hex HMAC-SHA256 of runId.timestamp.body>, equal to Python\'s hmac', async t => {
  const signature = signWebhook(SECRET, RUN_ID, 1700000000, BODY)
  t.match(signature, /^v1,[0-9a-f]{64}$/)
  t.equal(signature, `v1,${hex(SECRET, RUN_ID, '1700000000', BODY)}`)
  t.equal(signature.slice(3), pythonSignature(SECRET, RUN_ID, '1700000000', Buffer.from(BODY)), 'independent implementation agrees')
  t.equal(signWebhook(SECRET, RUN_ID, '1700000000', Buffer.from(BODY)), signature, 'string and Buffer bodies, number and string timestamps')
  t.not(signWebhook(SECRET, RUN_ID, 1700000001, BODY), signature, 'the timestamp is signed')
  t.not(signWebhook('other', RUN_ID, 1700000000, BODY), signature, 'the secret is the key')
})

t.test('signatureHeaderNames: lower-case names carrying the brand', async t => {
  t.same(signatureHeaderNames('Service'), { timestamp: 'x-service-webhook-timestamp', signature: 'x-service-webhook-signature' })
  t.same(signatureHeaderNames('Acme-Cloud'), { timestamp: 'x-acme-cloud-webhook-timestamp', signature: 'x-acme-cloud-webhook-signature' })
})

t.test('verifyWebhook: true for a genuine delivery, string or Buffer body', async t => {
  t.equal(verifyWebhook(SECRET, genuine(), BODY), true)
  t.equal(verifyWebhook(SECRET, genuine(), Buffer.from(BODY)), true)
  t.equal(verifyWebhook(SECRET, genuine(), BODY, {}), true)
  t.equal(verifyWebhook(SECRET, genuine({ body: '' }), ''), true, 'an empty body')
  t.equal(verifyWebhook(SECRET, genuine({ brand: 'Acme' }), BODY, { brand: 'Acme' }), true, 'another brand, named in options')
  t.equal(verifyWebhook(SECRET, genuine({ brand: 'acme' }), BODY, { brand: 'ACME' }), true, 'the brand is case-insensitive (header names are lower-case)')
  const binary = Buffer.from([0, 255, 128, 10, 13, 0xc3])
  t.equal(verifyWebhook(SECRET, genuine({ body: binary }), binary), true, 'arbitrary bytes')
})

t.test('verifyWebhook: false for anything altered', async t => {
  const headers = genuine()
  const signature = headers['x-service-webhook-signature'] as string
  t.equal(verifyWebhook('whsec_wrong', headers, BODY), false, 'wrong secret')
  t.equal(verifyWebhook('', headers, BODY), false, 'empty secret')
  t.equal(verifyWebhook(SECRET, headers, BODY.replace('200', '201')), false, 'tampered body')
  t.equal(verifyWebhook(SECRET, headers, BODY + ' '), false, 'a byte appended')
  t.equal(verifyWebhook(SECRET, headers, Buffer.from(BODY, 'latin1')), false, 'the body re-encoded')
  t.equal(verifyWebhook(SECRET, { ...headers, 'x-request-id': 'run_OTHER' }, BODY), false, 'tampered run id')
  t.equal(verifyWebhook(SECRET, { ...headers, 'x-service-webhook-timestamp': String(now() - 1) }, BODY), false, 'tampered timestamp')
  t.equal(verifyWebhook(SECRET, headers, BODY, { brand: 'Acme' }), false, 'wrong brand: the headers are not found')
  t.equal(verifyWebhook(SECRET, genuine({ brand: 'Acme' }), BODY), false, 'a branded delivery checked with the default brand')
  for (const name of ['x-request-id', 'x-service-webhook-timestamp', 'x-service-webhook-signature']) {
    const missing = { ...headers }
    delete missing[name]
    t.equal(verifyWebhook(SECRET, missing, BODY), false, `missing ${name}`)
    t.equal(verifyWebhook(SECRET, { ...headers, [name]: '' }, BODY), false, `empty ${name}`)
  }
  const given = signature.slice(3)
  const badSignatures: Array<[string, string]> = [
    [`v2,${given}`, 'v2 prefix'],
    [`V1,${given}`, 'upper-case version'],
    [given, 'no prefix'],
    [`v1${given}`, 'no comma'],
    [`v1,${given.toUpperCase()}`, 'upper-case hex'],
    [`v1,${given.slice(0, 63)}`, 'one hex digit short'],
    [`v1,${given}0`, 'one hex digit long'],
    [`v1,${given.slice(0, 32)}`, 'half a signature'],
    [`v1,${given.slice(0, 63)}g`, 'a non-hex character'],
    [`v1,${'z'.repeat(64)}`, 'non-hex'],
    [`v1, ${given}`, 'a space after the comma'],
    [`v1,${given},${given}`, 'two signatures in one'],
    [`v1,${Buffer.from(given, 'hex').toString('base64')}`, 'base64 instead of hex'],
    ['v1,', 'empty after the prefix'],
    [`v1,${'0'.repeat(64)}`, 'all zeros']
  ]
  for (const [value, why] of badSignatures) {
    t.equal(verifyWebhook(SECRET, { ...headers, 'x-service-webhook-signature': value }, BODY), false, why)
  }
})

t.test('verifyWebhook: the timestamp must be within the tolerance (default 300 s, either way; 0 = off)', async t => {
  const at = (offset: number, options = {}): boolean => verifyWebhook(SECRET, genuine({ timestamp: now() + offset }), BODY, options)
  t.equal(at(-290), true, '290 s old')
  t.equal(at(290), true, '290 s ahead')
  t.equal(at(-310), false, '310 s old')
  t.equal(at(310), false, '310 s ahead')
  t.equal(at(-86400 * 365), false, 'a year old')
  t.equal(at(-20, { toleranceSeconds: 10 }), false, 'a tighter tolerance')
  t.equal(at(-5, { toleranceSeconds: 10 }), true)
  t.equal(at(-3600, { toleranceSeconds: 7200 }), true, 'a wider tolerance')
  t.equal(at(-86400 * 365, { toleranceSeconds: 0 }), true, '0 turns the check off')
  t.equal(verifyWebhook(SECRET, genuine({ timestamp: 1 }), BODY, { toleranceSeconds: 0 }), true, 'any old timestamp with the check off')
  const headers = genuine()
  const ts = headers['x-service-webhook-timestamp'] as string
  for (const [value, why] of [[`${ts}.5`, 'fractional'], [`-${ts}`, 'negative'], [` ${ts}`, 'leading space'], ['1e9', 'exponent'], ['0x10', 'hex'], ['abc', 'words']]) {
    const signed = { ...headers, 'x-service-webhook-timestamp': value as string, 'x-service-webhook-signature': `v1,${hex(SECRET, RUN_ID, value as string, BODY)}` }
    t.equal(verifyWebhook(SECRET, signed, BODY, { toleranceSeconds: 0 }), false, `a ${why} timestamp, even when signed`)
  }
})

t.test('verifyWebhook: array-valued headers are refused', async t => {
  const headers = genuine()
  for (const name of ['x-request-id', 'x-service-webhook-timestamp', 'x-service-webhook-signature']) {
    const value = headers[name] as string
    t.equal(verifyWebhook(SECRET, { ...headers, [name]: [value] }, BODY), false, `${name} as a one-element array`)
    t.equal(verifyWebhook(SECRET, { ...headers, [name]: [value, value] }, BODY), false, `${name} twice`)
  }
})

t.test('verifyWebhook: never throws on garbage', async t => {
  const headers = genuine()
  const garbage: Array<[unknown, unknown, unknown, unknown, string]> = [
    [SECRET, null, BODY, undefined, 'null headers'],
    [SECRET, undefined, BODY, undefined, 'undefined headers'],
    [SECRET, 'headers', BODY, undefined, 'string headers'],
    [SECRET, headers, undefined, undefined, 'undefined body'],
    [SECRET, headers, null, undefined, 'null body'],
    [SECRET, headers, 42, undefined, 'number body'],
    [SECRET, headers, { a: 1 }, undefined, 'object body'],
    [undefined, headers, BODY, undefined, 'undefined secret'],
    [null, headers, BODY, undefined, 'null secret'],
    [42, headers, BODY, undefined, 'number secret'],
    [SECRET, { ...headers, 'x-request-id': 7 }, BODY, undefined, 'numeric run id'],
    [SECRET, { ...headers, 'x-service-webhook-signature': { v1: 'x' } }, BODY, undefined, 'object signature'],
    [SECRET, { ...headers, 'x-service-webhook-signature': 'v1,' + 'é'.repeat(64) }, BODY, undefined, 'non-ASCII signature'],
    [SECRET, { ...headers, 'x-service-webhook-timestamp': '9'.repeat(400) }, BODY, { toleranceSeconds: 0 }, 'a huge timestamp']
  ]
  for (const [secret, h, body, options, why] of garbage) {
    let result: unknown
    t.doesNotThrow(() => { result = (verifyWebhook as (...args: unknown[]) => unknown)(secret, h, body, options) }, why)
    t.equal(result, false, why)
  }
})

t.test('verifyWebhook: an empty secret is never genuine, even with a signature made with an empty key', async t => {
  const emptyKeyed = genuine({ secret: '' })
  t.equal(verifyWebhook('', emptyKeyed, BODY), false, 'signed and checked with ""')
  t.equal(verifyWebhook('', emptyKeyed, BODY, { toleranceSeconds: 0 }), false, 'with the timestamp check off too')
  t.equal(verifyWebhook('x', genuine({ secret: 'x' }), BODY), true, 'a one-character secret still works')
})

t.test('verifyWebhook: the run id must follow the run-id rule [A-Za-z0-9_-]{1,128}, so the signed string splits one way', async t => {
  // "<run_id>.<timestamp>.<body>" with a dot in the run id reads two ways: the same bytes sign both
  const ts = String(now())
  const oneWay = { 'x-request-id': RUN_ID, 'x-service-webhook-timestamp': ts, 'x-service-webhook-signature': `v1,${hex(SECRET, RUN_ID, ts, `${ts}.${BODY}`)}` }
  const otherWay = { ...oneWay, 'x-request-id': `${RUN_ID}.${ts}` }
  t.equal(oneWay['x-service-webhook-signature'], `v1,${hex(SECRET, `${RUN_ID}.${ts}`, ts, BODY)}`, 'one signature for both readings')
  t.equal(verifyWebhook(SECRET, oneWay, `${ts}.${BODY}`), true, 'the reading with a valid run id')
  t.equal(verifyWebhook(SECRET, otherWay, BODY), false, 'the reading with a dotted run id is refused')
  const malformed: Array<[string, string]> = [
    ['run.1', 'a dot'],
    ['x'.repeat(129), '129 characters'],
    ['run 1', 'a space'],
    ['run/1', 'a slash'],
    ['run:1', 'a colon'],
    ['rün', 'a non-ASCII letter'],
    ['run\t1', 'a tab']
  ]
  for (const [runId, why] of malformed) {
    t.equal(verifyWebhook(SECRET, genuine({ runId }), BODY), false, `a run id with ${why}, even when signed`)
  }
  for (const runId of ['x'.repeat(128), 'a', '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0', '_-_']) {
    t.equal(verifyWebhook(SECRET, genuine({ runId }), BODY), true, `run id ${runId.slice(0, 20)} is valid`)
  }
})

t.test('verifyWebhook: a bad option is a TypeError (a programming error), not a quiet true or false', async t => {
  const old = genuine({ timestamp: now() - 86400 * 365 })
  const badTolerances: Array<[unknown, string]> = [
    [-1, '-1'], [-0.5, '-0.5'], [Number.NaN, 'NaN'], [Number.POSITIVE_INFINITY, 'Infinity'], [Number.NEGATIVE_INFINITY, '-Infinity'],
    ['300', '"300"'], ['x', '"x"'], [null, 'null'], [true, 'boolean'], [300n, 'bigint']
  ]
  for (const [toleranceSeconds, shown] of badTolerances) {
    t.throws(() => verifyWebhook(SECRET, old, BODY, { toleranceSeconds } as VerifyWebhookOptions),
      { name: 'TypeError', message: `verifyWebhook: toleranceSeconds must be a finite number >= 0, got ${shown}` }, `toleranceSeconds ${shown}`)
  }
  const badBrands: Array<[unknown, string]> = [
    ['', '""'], ['Acme Cloud', 'a space'], ['-Acme', 'a leading dash'], ['Acme-', 'a trailing dash'], ['Acme--Cloud', 'two dashes'],
    ['Acme_Cloud', 'an underscore (WEBHOOK_HEADER_BRAND refuses it too)'], ['Acme.Cloud', 'a dot'], ['Acme\r\nX-Evil: 1', 'CRLF'],
    ['Äcme', 'a non-ASCII letter'], [42, 'a number'], [null, 'null']
  ]
  for (const [brand, why] of badBrands) {
    t.throws(() => verifyWebhook(SECRET, genuine(), BODY, { brand } as VerifyWebhookOptions),
      { name: 'TypeError', message: /^verifyWebhook: brand must be letters, digits and inner dashes, got / }, `brand: ${why}`)
  }
  for (const options of [null, 'Acme', 300]) {
    t.throws(() => verifyWebhook(SECRET, genuine(), BODY, options as unknown as VerifyWebhookOptions),
      { name: 'TypeError', message: /^verifyWebhook: options must be an object, got / }, `options ${String(options)}`)
  }
  t.throws(() => verifyWebhook('', {}, BODY, { toleranceSeconds: -1 }), { name: 'TypeError' }, 'thrown whatever the delivery')
  t.equal(verifyWebhook(SECRET, old, BODY, { toleranceSeconds: undefined, brand: undefined }), false, 'undefined fields take the defaults (300 s)')
  t.equal(verifyWebhook(SECRET, old, BODY, { toleranceSeconds: 0 }), true, '0 still turns the timestamp check off')
  t.equal(verifyWebhook(SECRET, genuine({ brand: 'Acme-Cloud-2' }), BODY, { brand: 'Acme-Cloud-2' }), true, 'letters, digits and inner dashes')
})

t.test('Standard Webhooks signature: the standard\'s own test vector', async t => {
  const { signStandardWebhook } = await import('../../src/webhook/standard-webhook-signature.ts')
  t.equal(signStandardWebhook('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}'),
    'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=')
  // a secret without the whsec_ prefix is keyed with its UTF-8 bytes
  const { createHmac } = await import('node:crypto')
  t.equal(signStandardWebhook('plain-secret', 'run-1', 1700000000, '{"a":1}'),
    'v1,' + createHmac('sha256', 'plain-secret').update('run-1.1700000000.{"a":1}').digest('base64'))
})
