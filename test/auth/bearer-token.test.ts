import t from 'tap'
import { readBearerToken } from '../../src/auth/bearer-token.ts'
import { InvalidTokenError, MissingTokenError, type SidecarError } from '../../src/errors.ts'

type Test = Parameters<Parameters<typeof t.test>[0]>[0]

/** Runs `call`, expecting it to throw; returns what it threw (or fails the test). */
function thrown (t: Test, call: () => unknown): unknown {
  try {
    const value = call()
    t.fail(`expected a throw, got ${JSON.stringify(value)}`)
    return undefined
  } catch (error) {
    return error
  }
}

function assertInvalid (t: Test, error: unknown): void {
  t.ok(error instanceof InvalidTokenError, 'InvalidTokenError')
  const e = error as SidecarError
  t.equal(e.status, 401)
  t.equal(e.code, 'SIDECAR_INVALID_TOKEN')
  t.equal(e.message, 'invalid token: Authorization must be "Bearer <token>"')
  t.equal(e.body(), JSON.stringify({ message: 'invalid token: Authorization must be "Bearer <token>"' }))
}

function assertMissing (t: Test, error: unknown): void {
  t.ok(error instanceof MissingTokenError, 'MissingTokenError')
  const e = error as SidecarError
  t.equal(e.status, 401)
  t.equal(e.code, 'SIDECAR_MISSING_TOKEN')
  t.equal(e.message, 'missing bearer token')
}

t.test('Authorization: Bearer gives the token', async t => {
  t.equal(readBearerToken({ authorization: 'Bearer abc.def.ghi' }, undefined), 'abc.def.ghi')
  t.equal(readBearerToken({ authorization: 'Bearer abc-_~+/.x==' }, undefined), 'abc-_~+/.x==')
  t.equal(readBearerToken({ authorization: 'Bearer   spaced  ' }, undefined), 'spaced')
})

t.test('the scheme is case-insensitive', async t => {
  t.equal(readBearerToken({ authorization: 'bearer tok1' }, undefined), 'tok1')
  t.equal(readBearerToken({ authorization: 'BEARER tok2' }, undefined), 'tok2')
  t.equal(readBearerToken({ authorization: 'bEaReR tok3' }, undefined), 'tok3')
})

t.test('the header wins over the query token', async t => {
  t.equal(readBearerToken({ authorization: 'Bearer from-header' }, 'from-query'), 'from-header')
  // a malformed header is not rescued by a query token
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Basic xyz' }, 'from-query')))
})

t.test('the query token is used when there is no header', async t => {
  t.equal(readBearerToken({}, 'from-query'), 'from-query')
  t.equal(readBearerToken({ 'x-other': 'Bearer nope' }, 'q'), 'q')
})

t.test('another scheme is 401 invalid', async t => {
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Basic xyz' }, undefined)))
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Token abc' }, undefined)))
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Bearerabc' }, undefined)))
})

t.test('Bearer without a token is 401 invalid', async t => {
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Bearer' }, undefined)))
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Bearer ' }, undefined)))
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: '' }, undefined)))
})

t.test('a token with characters outside RFC 6750 b64token is 401 invalid', async t => {
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Bearer a b' }, undefined)))
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Bearer a,b' }, undefined)))
  assertInvalid(t, thrown(t, () => readBearerToken({ authorization: 'Bearer =abc' }, undefined)))
})

t.test('no header and no query token is 401 missing', async t => {
  assertMissing(t, thrown(t, () => readBearerToken({}, undefined)))
})

t.test('an empty query token with no header is 401 missing', async t => {
  assertMissing(t, thrown(t, () => readBearerToken({}, '')))
})
