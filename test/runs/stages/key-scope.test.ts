import t from 'tap'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { runsAppFor, runsSidecarFor } from '../../helpers/runs-client.ts'
import type { Harness } from '../../helpers/sidecar-harness.ts'

// docs/runs.md, "Retrying safely: `Idempotency-Key`": a key is per project, app, path and caller
// (the token's `sub`), and "the same request" is the same method, path, query string (without
// webhookEndpoint and access_token) and body.

const REUSED = '{"message":"Idempotency-Key reused with a different body"}'

/** A keyed POST of `body` to `/v4/proj/app{path}`, with `token` as its bearer (none: no Authorization). */
async function keyed (h: Harness, path: string, key: string, token: string | undefined, body = '{"order":1}'): Promise<SentResponse> {
  return await send(`${h.base}/v4/proj/app${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    body
  })
}

const sign = async (h: Harness, sub: string | undefined): Promise<string> => await h.issuer.sign('proj', { claims: { sub } })

t.test('two callers (tokens of one project with different sub) with the same key and body each run, each gets its own answer', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { RUNTIME: 'custom' })
  const [alice, bob] = [await sign(h, 'alice'), await sign(h, 'bob')]
  const first = await keyed(h, '/json/order', 'order-1', alice)
  const other = await keyed(h, '/json/order', 'order-1', bob)
  t.equal(first.status, 200)
  t.equal(other.status, 200)
  t.equal(other.headers['idempotent-replayed'], undefined, 'the other caller\'s request is no repeat of the first')
  t.not(other.headers['x-request-id'], first.headers['x-request-id'], 'its own run')
  t.equal(app.requestsTo('/json/order').length, 2, 'the app ran each')
  for (const [token, answer] of [[alice, first], [bob, other]] as const) {
    const repeat = await keyed(h, '/json/order', 'order-1', token)
    t.equal(repeat.headers['idempotent-replayed'], 'true')
    t.equal(repeat.headers['x-request-id'], answer.headers['x-request-id'], 'each caller gets its own answer')
  }
  const another = await keyed(h, '/json/order', 'order-1', await sign(h, 'alice'))
  t.equal(another.headers['x-request-id'], first.headers['x-request-id'], 'another token with the same sub is the same caller')
  t.equal(app.requestsTo('/json/order').length, 2)
})

t.test('the query is part of the request: the same key and body with another query is 422, and the app is not called', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { RUNTIME: 'custom', ALLOW_QUERY_TOKEN: 'true' })
  const token = await sign(h, 'alice')
  const first = await keyed(h, '/json/profile?user=alice', 'profile', token)
  t.equal(first.status, 200)
  t.match(first.json(), { url: '/json/profile?user=alice' })
  const other = await keyed(h, '/json/profile?user=bob', 'profile', token)
  t.equal(other.status, 422)
  t.equal(other.text, REUSED)
  t.equal(app.requestsTo('/json/profile').length, 1, 'the app was not called the second time')
  // webhookEndpoint and access_token are not the request's: a repeat that adds them is the same request
  const viaQuery = await keyed(h, `/json/profile?user=alice&access_token=${await sign(h, 'alice')}&webhookEndpoint=https%3A%2F%2Fexample.com%2Fhook`, 'profile', undefined)
  t.equal(viaQuery.status, 200)
  t.equal(viaQuery.headers['idempotent-replayed'], 'true')
  t.same(viaQuery.body, first.body)
  t.equal(app.requestsTo('/json/profile').length, 1)
})

t.test('tokens without a sub are one caller; with auth off every call is the same caller', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { RUNTIME: 'custom' })
  const first = await keyed(h, '/json/anon', 'anon', await sign(h, undefined))
  const second = await keyed(h, '/json/anon', 'anon', await sign(h, undefined))
  t.equal(second.headers['idempotent-replayed'], 'true')
  t.equal(second.headers['x-request-id'], first.headers['x-request-id'])
  t.equal((await keyed(h, '/json/anon', 'anon', await sign(h, 'alice'))).headers['idempotent-replayed'], undefined, 'a token with a sub is another caller')
  const open = await runsSidecarFor(t, app.url, { RUNTIME: 'custom', DISABLE_AUTH: 'true' })
  const unauthenticated = await keyed(open, '/json/open', 'open', undefined)
  t.equal((await keyed(open, '/json/open', 'open', undefined)).headers['x-request-id'], unauthenticated.headers['x-request-id'])
  t.equal(app.requestsTo('/json/anon').length, 2)
  t.equal(app.requestsTo('/json/open').length, 1)
})
