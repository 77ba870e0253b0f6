import { request } from 'node:http'
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { metric } from '../../helpers/admin-metrics.ts'
import { send } from '../../helpers/http-client.ts'
import { privateRunStore } from '../../helpers/redis-server.ts'
import { receiverFor, runsAppFor, runsClient, runsSidecarFor, type RunsApp, type RunRecordBody } from '../../helpers/runs-client.ts'
import { eventually, type Harness, startHarness, startTestServer } from '../../helpers/sidecar-harness.ts'
import { patient } from '../../helpers/timing.ts'
import { openStream } from '../../stream/sse-test-kit.ts'

// Cancel reaches every in-flight /v4 call by its run id, plain calls included, on whichever
// replica holds it; with APP_CANCEL_PATH the app is told of every app request the sidecar cuts.

const CANCELED = '{"message":"run canceled"}'
const NO_SUCH_RUN = '{"message":"no such run"}'
/** The runs app answers any /json… path 200: it stands for the app's cancel route. */
const CANCEL_PATH = { APP_CANCEL_PATH: '/json/predictions/{run_id}/cancel' }
const canceledPlain = (runId: string): string => `{"run_id":"${runId}","status":"canceled"}`

/** The app's cancel requests for `runId`. */
const cancelsAtApp = (app: RunsApp, runId: string): RunsApp['requests'] => app.requestsTo(`/json/predictions/${runId}/cancel`)

/** Waits for the app's one cancel request for `runId` and checks it (POST, X-Request-Id); returns the ms it took from `since`. */
async function appToldOfCancel (t: Test, app: RunsApp, runId: string, since: number): Promise<number> {
  await eventually(() => cancelsAtApp(app, runId).length > 0, 3000)
  const took = performance.now() - since
  const [told] = cancelsAtApp(app, runId)
  t.equal(told?.method, 'POST', `${runId}: the app's cancel path is POSTed`)
  t.equal(told?.headers['x-request-id'], runId, `${runId}: with X-Request-Id: <run_id>`)
  return took
}

/** Two sidecars (or one, in memory) in front of one app. */
interface Fleet { readonly holder: Harness, readonly canceler: Harness, readonly app: RunsApp }

async function memoryFleet (t: Test, env: Record<string, string> = {}): Promise<Fleet> {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', PROJECT_ID: 'p', APP_NAME: 'a', ...CANCEL_PATH, ...env })
  return { holder: h, canceler: h, app }
}

async function redisFleet (t: Test, env: Record<string, string> = {}): Promise<Fleet> {
  const store = await privateRunStore(t)
  const app = await runsAppFor(t)
  const common = { DISABLE_AUTH: 'true', ...store.env, ...CANCEL_PATH, ...env }
  const holder = await runsSidecarFor(t, app.url, { ...common, HOSTNAME: 'holder' })
  const canceler = await runsSidecarFor(t, app.url, { ...common, HOSTNAME: 'canceler' })
  // both have subscribed the app's cancel channel: an ask is heard by 2
  await eventually(async () => await store.probe.call('PUBSUB', 'NUMSUB', 'as:{p/a}:cancel').then(r => (r as [string, number])[1] === 2))
  return { holder, canceler, app }
}

const FLEETS = [['memory, one replica', memoryFleet], ['Redis, canceled through the other replica', redisFleet]] as const

for (const [name, fleetFor] of FLEETS) {
  t.test(`${name}: a running plain call is canceled: 499 to its caller, the app request cut, the app's cancel path POSTed`, async t => {
    const { holder, canceler, app } = await fleetFor(t)
    const caller = runsClient({ base: holder.base })
    const pending = caller.call('/hold', { headers: { 'x-request-id': 'plain-1' } })
    const held = await app.waitForHeld(1)
    const since = performance.now()
    const cancel = await runsClient({ base: canceler.base }).cancel('plain-1')
    t.equal(cancel.status, 200)
    t.equal(cancel.text, canceledPlain('plain-1'), 'a plain call has no record: exactly its id and status')
    const answer = await pending
    t.equal(answer.status, 499)
    t.equal(answer.text, CANCELED)
    t.equal(answer.headers['x-request-id'], 'plain-1')
    // the app holds the request forever: only the cancel ends it, so a scaled bound excludes a hang
    t.ok(await held.cut - since < patient(1000), 'the app request was cut as the cancel came, not left to hang')
    t.ok(await appToldOfCancel(t, app, 'plain-1', since) < patient(1000), 'the app was told as the cancel came')
    const again = await runsClient({ base: canceler.base }).cancel('plain-1')
    t.equal(again.status, 404, 'a finished plain call is in progress nowhere')
    t.equal(again.text, NO_SUCH_RUN)
    t.equal(await metric(canceler, 'sidecar_cancels_total', { cause: 'request' }), 1)
    t.equal(await metric(holder, 'sidecar_app_cancel_requests_total', { outcome: 'sent' }), 1)
    t.equal(cancelsAtApp(app, 'plain-1').length, 1, 'once')
  })

  t.test(`${name}: a stream that has begun ends with event: error and the cancel's body`, async t => {
    const { holder, canceler, app } = await fleetFor(t)
    const stream = await openStream(`${holder.base}/v4/p/a/ndjson`, { 'x-request-id': 'stream-1' })
    const held = await app.waitForHeld(1)
    held.res.write('{"i":0}\n')
    await stream.waitForEvents(1)
    const cancel = await runsClient({ base: canceler.base }).cancel('stream-1')
    t.equal(cancel.text, canceledPlain('stream-1'))
    await stream.done
    t.equal(stream.status, 200)
    t.equal(stream.raw(), `data: {"i":0}\n\nevent: error\ndata: ${CANCELED}\n\nid: stream-1.done\n\n`)
    await held.cut
    await appToldOfCancel(t, app, 'stream-1', performance.now())
  })

  t.test(`${name}: a call waiting for a slot is canceled and never reaches the app`, async t => {
    const { holder, canceler, app } = await fleetFor(t, { REPLICA_CONCURRENCY: '1' })
    const caller = runsClient({ base: holder.base })
    const first = caller.call('/hold', { headers: { 'x-request-id': 'first' } })
    const held = await app.waitForHeld(1)
    const waiting = caller.call('/json/waiter', { headers: { 'x-request-id': 'waiting-1' } })
    await eventually(async () => await metric(holder, 'sidecar_queued_requests') === 1)
    const cancel = await runsClient({ base: canceler.base }).cancel('waiting-1')
    t.equal(cancel.status, 200)
    t.equal(cancel.text, canceledPlain('waiting-1'))
    const answer = await waiting
    t.equal(answer.status, 499)
    t.equal(answer.text, CANCELED)
    t.equal(answer.headers['x-request-id'], 'waiting-1')
    held.res.end('done')
    t.equal((await first).status, 200)
    // the slot is free again: a call after it goes through, and the canceled one never went
    t.equal((await caller.call('/json/after')).status, 200)
    t.same(app.requests.map(r => r.url), ['/hold', '/json/after'], 'the canceled call never reached the app, nor its cancel path')
  })

  t.test(`${name}: a run id in progress nowhere and never recorded is 404`, async t => {
    const { canceler, app } = await fleetFor(t)
    const r = await send(`${canceler.base}/v4/p/a/_runs/nowhere-1/cancel`, { method: 'POST', headers: { 'x-request-id': 'asks' } })
    t.equal(r.status, 404)
    t.equal(r.text, NO_SUCH_RUN)
    t.equal(r.headers['x-request-id'], 'asks')
    t.equal(app.requests.length, 0)
  })

  t.test(`${name}: a running sync call with an Idempotency-Key is canceled: record canceled, webhook 499`, async t => {
    const { holder, canceler, app } = await fleetFor(t, { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
    const receiver = await receiverFor(t)
    const caller = runsClient({ base: holder.base })
    const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
    const pending = caller.call(`/hold?${hook}`, { headers: { 'x-request-id': 'keyed-1', 'idempotency-key': 'k-1' } })
    const held = await app.waitForHeld(1)
    const cancel = await runsClient({ base: canceler.base }).cancel('keyed-1')
    t.equal(cancel.status, 200)
    const answered = cancel.json() as RunRecordBody
    t.match(answered, { run_id: 'keyed-1', status: 'canceled', status_code: 499, result: { message: 'run canceled' }, error: { message: 'run canceled' } })
    t.match((await runsClient({ base: holder.base }).read('keyed-1')).record, { status: 'canceled' }, 'written before the cancel answered')
    const answer = await pending
    t.equal(answer.status, 499)
    t.equal(answer.text, CANCELED)
    await held.cut
    await appToldOfCancel(t, app, 'keyed-1', performance.now())
    const record = await runsClient({ base: canceler.base }).until('keyed-1', r => r.status === 'canceled' && r.webhook?.status === 'delivered')
    t.equal(record.status_code, 499)
    t.same(record.result, { message: 'run canceled' })
    t.same(record.error, { message: 'run canceled' })
    const [attempt] = receiver.attempts
    t.match(JSON.parse(String(attempt?.body ?? '{}')), { run_id: 'keyed-1', status_code: 499, result: { message: 'run canceled' } })
    const finished = await runsClient({ base: canceler.base }).cancel('keyed-1')
    t.equal(finished.status, 409)
    t.equal(finished.text, '{"message":"run already finished"}')
  })
}

t.test('APP_CANCEL_PATH: POSTed on DEADLINE_SECONDS and when the caller leaves, never when the app itself failed', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', DEADLINE_SECONDS: '0.3', ...CANCEL_PATH })
  const caller = runsClient({ base: h.base })

  const failed = await caller.call('/reset', { headers: { 'x-request-id': 'app-failed' } })
  t.equal(failed.status, 502, 'the app reset the connection itself')

  const late = await caller.call('/hold', { headers: { 'x-request-id': 'deadline-1' } })
  t.equal(late.status, 504)
  const deadlineHeld = await app.waitForHeld(1)
  await deadlineHeld.cut
  await appToldOfCancel(t, app, 'deadline-1', performance.now())

  const leaving = request(`${h.base}/v4/p/a/hold`, { method: 'POST', headers: { 'x-request-id': 'left-1' } })
  leaving.on('error', () => {})
  leaving.end()
  const leftHeld = await app.waitForHeld(2)
  leaving.destroy()
  await leftHeld.cut
  await appToldOfCancel(t, app, 'left-1', performance.now())

  t.equal(cancelsAtApp(app, 'app-failed').length, 0, 'the app\'s own failure: not told (the two later cuts were)')
  t.equal(await metric(h, 'sidecar_cancels_total', { cause: 'deadline' }), 1)
  t.equal(await metric(h, 'sidecar_cancels_total', { cause: 'caller' }), 1)
  t.equal(await metric(h, 'sidecar_cancels_total', { cause: 'queue_ttl' }), 0, 'declared')
  t.equal(await metric(h, 'sidecar_app_cancel_requests_total', { outcome: 'sent' }), 2)
})

t.test('APP_CANCEL_PATH: an async run cut by its deadline tells the app; a failing cancel path is counted, logged, and changes nothing', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', DEADLINE_SECONDS: '0.3', APP_CANCEL_PATH: '/missing/{run_id}' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/hold', 'async-late')).status, 202)
  const held = await app.waitForHeld(1)
  await held.cut
  const record = (await client.finished('async-late')).record
  t.equal(record.status, 'failed')
  t.equal(record.status_code, 504)
  await eventually(() => app.requestsTo('/missing/async-late').length === 1)
  t.equal(app.requestsTo('/missing/async-late')[0]?.headers['x-request-id'], 'async-late')
  await eventually(async () => await metric(h, 'sidecar_app_cancel_requests_total', { outcome: 'failed' }) === 1)
  const warned = h.logs.find(line => line.msg === 'app cancel request refused')
  t.match(warned, { level: 40, runId: 'async-late', status: 404 })
  t.equal(await metric(h, 'sidecar_cancels_total', { cause: 'deadline' }), 1)
})

t.test('APP_CANCEL_PATH goes under APP_URL\'s path, as forwarded calls do; the end of the drain tells the app of the calls it cuts', async t => {
  const held: Array<() => void> = []
  const app = await startTestServer((req, res) => {
    if ((req.url as string).endsWith('/cancel')) res.end('ok')
    else held.push(() => { res.end('late') }) // held until the drain cuts it
  })
  t.teardown(() => app.close())
  const h = await startHarness(`${app.url}/base`, { DISABLE_AUTH: 'true', APP_CANCEL_PATH: '/predictions/{run_id}/cancel' })
  const pending = send(`${h.base}/v4/p/a/work`, { method: 'POST', headers: { 'x-request-id': 'drained-1' } }).catch(() => undefined)
  await eventually(() => held.length === 1)
  t.equal(app.requests[0]?.url, '/base/work')
  t.equal(await h.sidecar.drain(0.2), false, 'the call was cut at the end of the grace period')
  await pending
  // the close waited for the cancel POST before it closed the app's connections
  t.same(app.requests.map(r => [r.method, r.url, r.headers['x-request-id']]), [
    ['POST', '/base/work', 'drained-1'],
    ['POST', '/base/predictions/drained-1/cancel', 'drained-1']
  ])
  await h.jwks.close()
})

t.test('only a call that passed its checks is known by its run id: refused requests and the cancel itself never stand in for it', async t => {
  const { holder, app } = await memoryFleet(t)
  const caller = runsClient({ base: holder.base })
  const pending = caller.call('/hold', { headers: { 'x-request-id': 'shadowed-1' } })
  const held = await app.waitForHeld(1)
  // requests refused before they could run, each sent with the running call's run id
  const otherProject = await send(`${holder.base}/v4/other/a/json`, { method: 'POST', headers: { 'x-request-id': 'shadowed-1' } })
  t.equal(otherProject.status, 404, 'another project: refused by the route check')
  const badRunRoute = await send(`${holder.base}/v4/p/a/_runs/shadowed-1/nothing`, { headers: { 'x-request-id': 'shadowed-1' } })
  t.equal(badRunRoute.status, 404, 'a `_runs` request that names no route')
  const tooLarge = await caller.call('/json', { headers: { 'x-request-id': 'shadowed-1', 'content-length': '999999999999' }, body: '' }).catch(() => undefined)
  t.not(tooLarge?.status, 200, 'a body refused before it reached the app')
  // a cancel sent with the run id as its own X-Request-Id cancels the call, not itself
  const cancel = await send(caller.runUrl('shadowed-1', '/cancel'), { method: 'POST', headers: { 'x-request-id': 'shadowed-1' } })
  t.equal(cancel.status, 200)
  t.equal(cancel.text, canceledPlain('shadowed-1'))
  const answer = await pending
  t.equal(answer.status, 499, 'the running call was canceled')
  t.equal(answer.text, CANCELED)
  await held.cut
  await eventually(() => cancelsAtApp(app, 'shadowed-1').length === 1, 3000)
})
