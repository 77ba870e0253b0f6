import type { OutgoingHttpHeaders } from 'node:http'
import { connect } from 'node:net'
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { metric } from '../../helpers/admin-metrics.ts'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { testRedis } from '../../helpers/redis-server.ts'
import { receiverFor, runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { eventually, type Harness, startTestServer, type TestServer } from '../../helpers/sidecar-harness.ts'
import { patient, sleep } from '../../helpers/timing.ts'
import { openStream } from '../../stream/sse-test-kit.ts'

// docs/runs.md, "Retrying safely: `Idempotency-Key`": a request that reached the app runs once,
// whatever its caller does.

const IN_PROGRESS = '{"message":"a request with this Idempotency-Key is in progress"}'

/** An app that counts its executions and answers each one `{"execution": n}` after `ms`; how each ended. */
interface CountingApp extends TestServer {
  /** One per execution: resolves 'finished' when the app's answer went out whole, 'cut' when the sidecar cut it. */
  readonly ends: Array<Promise<'finished' | 'cut'>>
}

async function countingApp (t: Test, ms = 1000): Promise<CountingApp> {
  const ends: CountingApp['ends'] = []
  const app = await startTestServer((_req, res) => {
    const execution = ends.length + 1
    const timer = setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ execution }))
    }, ms)
    ends.push(new Promise(resolve => res.once('close', () => {
      clearTimeout(timer)
      resolve(res.writableFinished ? 'finished' : 'cut')
    })))
  })
  t.teardown(() => app.close())
  return Object.assign(app, { ends })
}

const keyed = (key: string, runId?: string): OutgoingHttpHeaders =>
  ({ 'content-type': 'application/json', 'idempotency-key': key, ...(runId === undefined ? {} : { 'x-request-id': runId }) })

/** The same keyed POST as the first, sent to `h`. */
const retry = async (h: Harness, path: string, key: string, body = '{"n":1}'): Promise<SentResponse> =>
  await send(`${h.base}/v4/proj/app${path}`, { method: 'POST', headers: keyed(key), body })

/** Sends a keyed POST to `h` and drops it once `reached` resolves (the app has it); resolves once the sidecar logged the caller gone. */
async function dropOnceReached (t: Test, h: Harness, path: string, key: string, runId: string, reached: () => Promise<unknown>): Promise<void> {
  const leaving = new AbortController()
  const first = fetch(`${h.base}/v4/proj/app${path}`, { method: 'POST', headers: keyed(key, runId) as Record<string, string>, body: '{"n":1}', signal: leaving.signal })
    .then(() => 'answered', () => 'aborted')
  await reached()
  leaving.abort()
  t.equal(await first, 'aborted', 'the caller left before its answer')
  await eventually(() => h.logs.some(line => line.runId === runId && line.aborted === true))
}

/** The dropped-caller retry: the first to `first` drops once the app has it; its retries go to `other`. */
async function droppedRetry (t: Test, app: CountingApp, first: Harness, other: Harness, key: string, runId: string): Promise<SentResponse> {
  await dropOnceReached(t, first, '/work', key, runId, async () => { await eventually(() => app.ends.length === 1) })
  const during = await retry(other, '/work', key)
  t.equal(during.status, 409, 'the retry while it runs: 409')
  t.equal(during.text, IN_PROGRESS)
  t.equal(await app.ends[0], 'finished', 'the app request went on to its end')
  const record = await runsClient({ base: other.base, project: 'proj', app: 'app' }).until(runId, r => r.status !== 'running')
  t.equal(record.status, 'succeeded')
  t.equal(record.status_code, 200)
  const replay = await retry(other, '/work', key)
  t.equal(replay.status, 200)
  t.equal(replay.headers['idempotent-replayed'], 'true')
  t.equal(replay.headers['x-request-id'], runId, 'the first\'s X-Request-Id')
  t.equal(app.ends.length, 1, 'the app ran once')
  return replay
}

t.test('a keyed caller that leaves once its request reached the app: the app runs once, to its end; the retry gets 409, then the kept answer', async t => {
  for (const runtime of ['cortex', 'custom']) {
    const app = await countingApp(t)
    const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: runtime })
    const replay = await droppedRetry(t, app, h, h, `dropped-${runtime}`, `dropped-${runtime}`)
    if (runtime === 'custom') t.equal(replay.text, '{"execution":1}')
    else t.match(replay.json(), { run_id: 'dropped-cortex', result: { execution: 1 } })
    t.equal(replay.headers['content-type'], runtime === 'custom' ? 'application/json' : 'application/json; charset=utf-8')
    t.equal(await metric(h, 'sidecar_inflight_requests'), 0, `${runtime}: nothing left in flight`)
  }
})

t.test('the same on replicas sharing a Redis run store: the retry on the other replica gets 409, then the kept answer', async t => {
  const redis = await testRedis(t)
  if (redis === undefined) return
  const app = await countingApp(t)
  const env = { DISABLE_AUTH: 'true', RUN_STORE_URL: redis, PROJECT_ID: 'proj', APP_NAME: 'app' }
  const [a, b] = [await runsSidecarFor(t, app.url, env), await runsSidecarFor(t, app.url, env)]
  const replay = await droppedRetry(t, app, a, b, 'dropped-fleet', 'dropped-fleet')
  t.match(replay.json(), { run_id: 'dropped-fleet', result: { execution: 1 } })
})

t.test('a streamed answer whose caller left before it began: every event is kept, the replay has them all', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  await dropOnceReached(t, h, '/hold/stream', 'stream-before', 'stream-before', async () => await app.waitForHeld(1))
  const held = await app.waitForHeld(1)
  t.equal((await retry(h, '/hold/stream', 'stream-before')).status, 409)
  held.res.writeHead(200, { 'content-type': 'application/x-ndjson' })
  held.res.write('{"token":"a"}\n')
  held.res.write('"b"\n')
  held.res.end('{"token":"c"}\n')
  const record = await runsClient({ base: h.base, project: 'proj', app: 'app' }).until('stream-before', r => r.status !== 'running')
  t.equal(record.status, 'succeeded')
  t.same(record.result, [{ token: 'a' }, 'b', { token: 'c' }])
  t.equal(held.wasCut(), false, 'the app request was not cut')
  const replay = await retry(h, '/hold/stream', 'stream-before')
  t.equal(replay.status, 200)
  t.equal(replay.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(replay.headers['x-request-id'], 'stream-before')
  t.match(replay.text, /^data: \{"token":"a"\}\n\ndata: "b"\n\ndata: \{"token":"c"\}\n\n/, 'every event, in order')
  t.equal(app.requestsTo('/hold/stream').length, 1, 'the app ran once')
  t.equal(await metric(h, 'sidecar_sse_streams'), 0, 'no stream left counted open')
})

t.test('a streamed answer whose caller left mid-stream: the rest is kept; an app failing after it ends the kept stream with its error event', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  for (const ending of ['end', 'fail']) {
    const key = `mid-${ending}`
    const nth = app.held.length + 1
    const stream = await openStream(`${h.base}/v4/proj/app/ndjson/${ending}`, { 'idempotency-key': key, 'x-request-id': key }, 'POST')
    const held = await app.waitForHeld(nth)
    held.res.write('{"i":0}\n')
    await stream.waitForEvents(1)
    stream.req.destroy()
    await eventually(() => h.logs.some(line => line.runId === key && line.aborted === true))
    t.equal((await retry(h, `/ndjson/${ending}`, key, '')).status, 409)
    const runs = runsClient({ base: h.base, project: 'proj', app: 'app' })
    const events = await runs.follow(key)
    held.res.write('{"i":1}\n')
    await events.waitForEvents(2) // the sidecar has the second event: the app may fail now
    if (ending === 'end') held.res.end('{"i":2}\n')
    else held.res.destroy()
    await events.done
    await runs.until(key, r => r.status !== 'running')
    const replay = await retry(h, `/ndjson/${ending}`, key, '')
    t.equal(replay.status, 200)
    t.equal(replay.headers['idempotent-replayed'], 'true')
    if (ending === 'end') {
      t.equal(held.wasCut(), false)
      t.match(replay.text, /^data: \{"i":0\}\n\ndata: \{"i":1\}\n\ndata: \{"i":2\}\n\n/)
    } else {
      t.match(replay.text, /^data: \{"i":0\}\n\ndata: \{"i":1\}\n\nevent: error\ndata: \{"message":"app failed mid-stream: [^\n]+"\}\n\n/)
    }
    t.equal(app.requestsTo(`/ndjson/${ending}`).length, 1, `${ending}: the app ran once`)
  }
})

t.test('a caller that stopped reading, then left: the app is read on to its end (an answer too large to keep is 409 to its repeats)', async t => {
  const chunk = Buffer.alloc(64 * 1024, 'x')
  let blocked = 0 // performance.now() when the app's last write waited for the sidecar to read on; 0 while it flows
  let finished: () => void = () => {}
  const done = new Promise<void>(resolve => { finished = resolve })
  let left = 1024 // 64 MiB
  const app = await startTestServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/octet-stream' })
    left = 1024 // 64 MiB: more than every buffer between the app and a caller that reads nothing
    const pump = (): void => {
      blocked = 0
      while (left-- > 0) {
        if (!res.write(chunk)) { blocked = performance.now(); res.once('drain', pump); return }
      }
      res.end(finished)
    }
    pump()
  })
  t.teardown(() => app.close())
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom', ENVELOPE_MAX_BODY_BYTES: '1048576' })
  const caller = connect(Number(new URL(h.base).port), '127.0.0.1')
  caller.pause() // reads nothing: the sidecar pauses the app
  caller.write('POST /v4/proj/app/big HTTP/1.1\r\nhost: x\r\nidempotency-key: big\r\nx-request-id: big\r\ncontent-length: 2\r\n\r\n{}')
  await eventually(() => blocked > 0 && performance.now() - blocked > 300) // the app has waited a while: the sidecar paused it
  caller.destroy()
  await done
  t.equal(left, -1, 'the app wrote its answer to the end: every chunk went out')
  await runsClient({ base: h.base, project: 'proj', app: 'app' }).until('big', r => r.status === 'succeeded')
  const repeat = await retry(h, '/big', 'big', '{}')
  t.equal(repeat.status, 409)
  t.equal(repeat.text, '{"message":"the answer to this Idempotency-Key was too large to keep"}')
  t.equal(app.requests.length, 1)
})

t.test('DEADLINE_SECONDS still cuts a request whose caller left: its 504 is the kept answer', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', DEADLINE_SECONDS: '2' })
  await dropOnceReached(t, h, '/hold/late', 'late', 'late', async () => await app.waitForHeld(1))
  const held = await app.waitForHeld(1)
  t.equal(held.wasCut(), false, 'not cut when its caller left')
  await held.cut
  const record = await runsClient({ base: h.base, project: 'proj', app: 'app' }).until('late', r => r.status !== 'running')
  t.equal(record.status_code, 504)
  const replay = await retry(h, '/hold/late', 'late')
  t.equal(replay.status, 504)
  t.equal(replay.text, '{"message":"request exceeded its deadline of 2s"}')
  t.equal(replay.headers['idempotent-replayed'], 'true')
  t.equal(app.requestsTo('/hold/late').length, 1)
})

t.test('the webhook of a request whose caller left reports the app\'s answer', async t => {
  const app = await countingApp(t, 300)
  const receiver = await receiverFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const path = `/work?webhookEndpoint=${encodeURIComponent(receiver.url)}`
  await dropOnceReached(t, h, path, 'hooked', 'hooked', async () => { await eventually(() => app.ends.length === 1) })
  const [delivery] = await receiver.waitForAttempts(1)
  const body = JSON.parse(delivery?.body.toString() ?? '{}') as Record<string, unknown>
  t.equal(body.status_code, 200)
  t.same(body.result, { execution: 1 })
  const record = await runsClient({ base: h.base, project: 'proj', app: 'app' }).until('hooked', r => r.webhook?.status === 'delivered')
  t.equal(record.status, 'succeeded')
  t.same(record.result, { execution: 1 })
})

t.test('a keyed caller that leaves while it waits for a slot frees its key: the retry runs', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom', REPLICA_CONCURRENCY: '1' })
  const blocker = send(`${h.base}/v4/proj/app/hold/blocker`, { method: 'POST' })
  const busy = await app.waitForHeld(1)
  await dropOnceReached(t, h, '/json/queued', 'queued', 'queued', async () => { await eventually(async () => await metric(h, 'sidecar_queued_requests') === 1) })
  await eventually(async () => await metric(h, 'sidecar_queued_requests') === 0)
  const again = retry(h, '/json/queued', 'queued')
  await eventually(async () => await metric(h, 'sidecar_queued_requests') === 1) // the retry claimed the key and waits for the slot
  busy.res.writeHead(200).end()
  await blocker
  const answer = await again
  t.equal(answer.status, 200)
  t.equal(answer.headers['idempotent-replayed'], undefined, 'it ran')
  t.equal(app.requestsTo('/json/queued').length, 1, 'the first never reached the app; the retry did')
})

t.test('a plain call whose caller leaves is still cut at once', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const leaving = new AbortController()
  const gone = fetch(`${h.base}/v4/proj/app/hold/plain`, { method: 'POST', body: '{}', signal: leaving.signal }).catch(() => 'aborted')
  const held = await app.waitForHeld(1)
  const leftAt = performance.now()
  leaving.abort()
  t.equal(await gone, 'aborted')
  // no deadline is set: left uncut, the app request would hang far past the scaled bound
  const cutAt = await Promise.race([held.cut, sleep(patient(2000), { ref: false }).then(() => undefined)])
  t.ok(cutAt !== undefined && cutAt - leftAt < patient(1000), 'the app saw the abort at once, not left to hang')
})
