import { request } from 'node:http'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { send } from '../../helpers/http-client.ts'
import { runsClient } from '../../helpers/runs-client.ts'
import { runsSetup } from '../../helpers/runs-setup.ts'
import { eventually, type Harness } from '../../helpers/sidecar-harness.ts'
import { openStream } from '../../stream/sse-test-kit.ts'

// docs/controlling-work.md, "Bounded wait: `Prefer: wait`": Prefer: wait=N answers as usual
// within N s, else 202 and the call goes on as a run

// each subtest has a sidecar, an app and (redis) a private Redis of its own, and mostly waits out a
// 1 s wait: two at a time
t.jobs = 2

t.test('answered within its wait: a plain call (no record, no Preference-Applied); a wait outside 1–3600 or malformed is ignored', async t => {
  const s = await runsSetup(t, 'memory')
  for (const prefer of ['wait=5', 'wait=0', 'wait=abc', 'wait=3601', 'wait=-1', 'wait=1.5', 'handling=lenient, wait=10']) {
    const answer = await s.client.call('/json/quick', { headers: { prefer, 'x-request-id': 'quick' } })
    t.equal(answer.status, 200, prefer)
    t.equal(answer.headers['preference-applied'], undefined, `${prefer}: no Preference-Applied`)
    t.match(answer.json(), { run_id: 'quick', result: { url: '/json/quick' } })
  }
  t.equal((await send(s.client.runUrl('quick'), {})).status, 404, 'no run recorded')

  const ignored = s.client.call('/hold/ignored', { headers: { prefer: 'wait=0', 'x-request-id': 'ignored' } })
  const held = await s.app.waitForHeld(1)
  await new Promise(resolve => setTimeout(resolve, 1200)) // past where a 1 s wait would have answered: wait=0 set none
  held.res.writeHead(200, { 'content-type': 'application/json' }).end('{"late":true}')
  t.equal((await ignored).status, 200, 'wait=0 is ignored: the caller waits for the answer')
})

for (const backend of ['memory', 'redis'] as const) {
  t.test(`${backend}: the wait runs out at the app: 202 running, and the app's answer becomes the run's result, its webhook sent`, async t => {
    const s = await runsSetup(t, backend)
    const started = performance.now()
    const call = s.client.call(`/hold/slow?${s.hook}`, { headers: { prefer: 'wait=1', 'x-request-id': 'slow' }, body: '{"n":1}' })
    const held = await s.app.waitForHeld(1)
    const answer = await call
    const took = performance.now() - started
    t.equal(answer.status, 202)
    t.equal(answer.text, '{"run_id":"slow","status":"running"}')
    t.equal(answer.headers.location, '/v4/p/a/_runs/slow')
    t.equal(answer.headers['preference-applied'], 'wait=1')
    t.equal(answer.headers['x-request-id'], 'slow')
    t.ok(took >= 950, `answered after ${took.toFixed(0)} ms: at the wait, not before`)
    t.equal(held.res.headersSent, false, 'while the app still held the call: the wait, not the app, answered it')
    const running = (await s.client.read('slow')).record
    t.equal(running.status, 'running')
    t.type(running.started_at, 'string')
    t.notOk(held.wasCut(), 'the app request goes on')

    held.res.writeHead(200, { 'content-type': 'application/json' }).end('{"answer":42}')
    const { record } = await s.client.finished('slow')
    t.equal(record.status, 'succeeded')
    t.equal(record.status_code, 200)
    t.same(record.result, { answer: 42 }, 'the result is the app\'s answer, as an async run\'s')
    const [attempt] = await s.receiver.waitForAttempts(1)
    t.match(JSON.parse(attempt?.body.toString() as string), { run_id: 'slow', status_code: 200, result: { answer: 42 } })
    t.equal(s.app.requestsTo('/hold/slow').length, 1, 'sent to the app once')
    const events = await s.client.follow('slow')
    await events.done
    t.same(events.events.map(e => e.event), ['done'], 'its events end with done')
  })

  t.test(`${backend}: a stream that began within the wait goes on to the caller; one that begins after the 202 is recorded as the run's events`, async t => {
    const s = await runsSetup(t, backend)
    const early = await openStream(`${s.h.base}/v4/p/a/ndjson/early`, { prefer: 'wait=1', 'x-request-id': 'early' }, 'POST')
    const first = await s.app.waitForHeld(1)
    first.res.write('{"n":0}\n')
    await early.waitForEvents(1)
    await new Promise(resolve => setTimeout(resolve, 1200)) // past the wait
    first.res.end('{"n":1}\n')
    await early.done
    t.equal(early.status, 200)
    t.same(early.events.filter(e => e.event === undefined).map(e => e.data), ['{"n":0}', '{"n":1}'], 'the caller got the whole stream')
    t.equal((await send(s.client.runUrl('early'), {})).status, 404, 'not a run')

    const late = s.client.call('/hold/late-stream', { headers: { prefer: 'wait=1', 'x-request-id': 'late' } })
    const second = await s.app.waitForHeld(2)
    t.equal((await late).status, 202)
    second.res.writeHead(200, { 'content-type': 'application/x-ndjson' })
    second.res.write('{"token":"a"}\n')
    second.res.end('{"token":"b"}\n')
    const { record } = await s.client.finished('late')
    t.equal(record.status, 'succeeded')
    t.same(record.result, [{ token: 'a' }, { token: 'b' }])
    const events = await s.client.follow('late')
    await events.done
    t.same(events.events.map(e => [e.id, e.data]).slice(0, 2), [['0', '{"token":"a"}'], ['1', '{"token":"b"}']], 'its events, numbered from 0')
  })

  t.test(`${backend}: the wait runs out while the call waits for a slot: 202 queued, it runs once as an async run${backend === 'redis' ? ', on whichever replica has a slot' : ''}`, async t => {
    const s = await runsSetup(t, backend, { REPLICA_CONCURRENCY: '1' })
    const blocker = s.client.call('/hold/blocker', { headers: { 'x-request-id': 'blocker' } })
    const blocking = await s.app.waitForHeld(1)
    const answer = await s.client.call('/json/waited', { headers: { prefer: 'wait=1', 'x-request-id': 'waited' }, body: 'the body' })
    t.equal(answer.status, 202)
    t.equal(answer.text, '{"run_id":"waited","status":"queued"}')
    t.equal(answer.headers['preference-applied'], 'wait=1')
    t.equal(answer.headers.location, '/v4/p/a/_runs/waited')
    t.equal((await s.client.read('waited')).record.status, 'queued')
    blocking.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    await blocker
    const { record } = await s.client.finished('waited')
    t.equal(record.status, 'succeeded')
    t.match(record.result, { method: 'POST', url: '/json/waited', body: 'the body' }, 'the request as the caller sent it')
    t.equal(s.app.requestsTo('/json/waited').length, 1, 'sent to the app once')
  })
}

t.test('redis: a run whose wait ran out in the queue is taken by another replica with a free slot', async t => {
  const s = await runsSetup(t, 'redis', { REPLICA_CONCURRENCY: '1' }, true)
  const other = s.other as Harness
  // both replicas busy: the waiting call's wait runs out in the first one's gate
  const blockers = [s.client.call('/hold/b1'), runsClient({ base: other.base }).call('/hold/b2')]
  await s.app.waitForHeld(2)
  const answer = await s.client.call('/json/anywhere', { headers: { prefer: 'wait=1', 'x-request-id': 'anywhere' } })
  t.equal(answer.status, 202)
  t.equal(answer.text, '{"run_id":"anywhere","status":"queued"}')
  // the second replica's slot frees first: it takes the run
  s.app.held[1]?.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  const { record } = await s.client.finished('anywhere')
  t.equal(record.status, 'succeeded')
  await eventually(() => s.app.requestsTo('/json/anywhere').length === 1)
  s.app.held[0]?.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  await Promise.all(blockers)
})

t.test('redis: a run whose wait ran out at the app, cut by the end of the grace period, fails 503 replica stopped at once; keyed calls, their caller gone or still there, likewise', async t => {
  const s = await runsSetup(t, 'redis', {}, true)
  const other = runsClient({ base: (s.other as Harness).base })
  const waited = await s.client.call('/hold/long', { headers: { prefer: 'wait=1', 'x-request-id': 'cut-wait' } })
  t.equal(waited.status, 202)
  t.equal(waited.text, '{"run_id":"cut-wait","status":"running"}')
  // a keyed sync call whose caller leaves goes on without it
  const keyed = request(`${s.h.base}/v4/p/a/hold/keyed`, { method: 'POST', headers: { 'idempotency-key': 'k-cut', 'x-request-id': 'cut-keyed', 'content-type': 'application/json' } })
  keyed.on('error', () => {})
  keyed.end('{}')
  await s.app.waitForHeld(2)
  keyed.destroy()
  await eventually(async () => (await other.read('cut-keyed')).record.status === 'running')
  // and a keyed call whose caller is still there when the grace period ends: cut with the rest
  const connected = s.client.call('/hold/connected', { headers: { 'idempotency-key': 'k-connected', 'x-request-id': 'cut-connected' }, body: '{}' }).catch(() => undefined)
  await s.app.waitForHeld(3)

  t.equal(await s.h.sidecar.drain(0.2), false, 'the grace period ended with runs still at the app')
  t.equal(await connected, undefined, 'the connected caller was cut')
  for (const runId of ['cut-wait', 'cut-keyed', 'cut-connected']) {
    // read on the other replica, at once: never left `running` until a lost sweep
    const { record } = await other.read(runId)
    t.equal(record.status, 'failed', `${runId}: failed`)
    t.equal(record.status_code, 503, `${runId}: 503`)
    t.same(record.error, { message: 'replica stopped' }, `${runId}: replica stopped`)
    t.same(record.result, { message: 'replica stopped' })
  }
})
