import t, { type Test } from 'tap'
import { send, type SentResponse } from '../helpers/http-client.ts'
import { runsAppFor, runsClient, runsSidecarFor } from '../helpers/runs-client.ts'
import { eventually } from '../helpers/sidecar-harness.ts'

// docs/routes.md, "Streams": a reconnecting EventSource never runs a plain call twice. A GET or
// HEAD with `Last-Event-ID` ending in `.done` is answered 204 (X-Request-Id, no body) without
// reaching the app, after the route and auth checks and before the run routes; anything else is
// a call.

/** Exactly the sidecar's 204: the status, the run id, no body, no content headers. */
function assertStopped (t: Test, r: SentResponse, runId: string, what: string): void {
  t.equal(r.status, 204, `${what}: 204`)
  t.equal(r.headers['x-request-id'], runId, `${what}: X-Request-Id`)
  t.equal(r.body.length, 0, `${what}: no body`)
  t.equal(r.headers['content-type'], undefined, `${what}: no Content-Type`)
  t.equal(r.headers['transfer-encoding'], undefined, `${what}: no chunked body`)
}

t.test('GET and HEAD with Last-Event-ID <id>.done: 204 with X-Request-Id, no body, the app never called', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url)
  const client = runsClient({ base: h.base, project: 'proj', app: 'app', token: await h.token('proj') })
  for (const method of ['GET', 'HEAD']) {
    const runId = `stop-${method.toLowerCase()}`
    const r = await client.call('/json/x?y=1', { method, headers: { 'last-event-id': 'an-earlier-run.done', 'x-request-id': runId } })
    assertStopped(t, r, runId, method)
    await eventually(() => h.logs.some(line => line.runId === runId))
    t.match(h.logs.filter(line => line.runId === runId), [{ method, path: '/v4/proj/app/json/x', status: 204 }], `${method}: one log line, 204`)
  }
  const fresh = await client.call('/json', { method: 'GET', headers: { 'last-event-id': '.done' } })
  t.equal(fresh.status, 204, 'any value ending in .done')
  t.match(fresh.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'a fresh run id when the caller sent none')
  t.equal(app.requests.length, 0, 'the app was never called')
})

t.test('the route and auth checks come first: 404 and 401 as for any call', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { PROJECT_ID: 'proj' })
  const headers = { 'last-event-id': 'r.done', 'x-request-id': 'checked' }
  const noToken = await send(`${h.base}/v4/proj/app/ndjson`, { headers })
  t.equal(noToken.status, 401)
  t.equal(noToken.text, '{"message":"missing bearer token"}')
  const otherProject = await send(`${h.base}/v4/another/app/ndjson`, { headers: { ...headers, authorization: `Bearer ${await h.token('proj')}` } })
  t.equal(otherProject.status, 404)
  t.equal(otherProject.text, '{"message":"no such app"}')
  t.equal(app.requests.length, 0)
})

t.test('a POST with Last-Event-ID <id>.done is an ordinary call; so is a GET with a numeric Last-Event-ID', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom' })
  const client = runsClient({ base: h.base })
  const post = await client.call('/json', { method: 'POST', headers: { 'last-event-id': 'x.done', 'x-request-id': 'posted' }, body: 'b' })
  t.equal(post.status, 200)
  t.same(post.json(), { method: 'POST', url: '/json', body: 'b' }, 'the app answered')
  t.equal(post.headers['x-request-id'], 'posted')
  t.equal(app.requestsTo('/json')[0]?.headers['last-event-id'], 'x.done', 'the header reached the app')

  const others = ['3', 'x.DONE', 'x.done.1', 'done', 'x.done,y']
  for (const [i, value] of others.entries()) {
    const r = await client.call('/json', { method: 'GET', headers: { 'last-event-id': value } })
    t.equal(r.status, 200, `Last-Event-ID ${JSON.stringify(value)}: a call`)
    t.equal(app.requestsTo('/json')[i + 1]?.headers['last-event-id'], value, 'the app got it')
  }
  t.equal(app.requestsTo('/json').length, 1 + others.length)
})

t.test('the run routes too: a record or events request with Last-Event-ID <id>.done is 204, a known run or not', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'kept')).status, 202)
  t.equal((await client.finished('kept')).record.status, 'succeeded')
  for (const [runId, suffix] of [['kept', ''], ['kept', '/events'], ['never-recorded', ''], ['never-recorded', '/events']] as const) {
    const r = await send(client.runUrl(runId, suffix), { headers: { 'last-event-id': `${runId}.done`, 'x-request-id': 'reader' } })
    assertStopped(t, r, 'reader', `${runId}${suffix}`)
  }
  const head = await send(client.runUrl('kept'), { method: 'HEAD', headers: { 'last-event-id': 'kept.done', 'x-request-id': 'reader' } })
  assertStopped(t, head, 'reader', 'HEAD record')
  t.equal(app.requestsTo('/json').length, 1, 'the run ran once')
})
