import t from 'tap'
import { RunStoreUnavailableError } from '../../../src/errors.ts'
import { UNLIMITED_PARALLEL } from '../../../src/runs/runner/async-runner.ts'
import type { RunEventItem, RunView, TakenRun } from '../../../src/runs/run-data.ts'
import type { RunRecords } from '../../../src/runs/store/run-records.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import type { TraceAttributes, TraceContext, Tracer } from '../../../src/shared/trace-contracts.ts'
import {
  answer, deadOrigin, ended, eventKept, holdSlot, itemsOf, memoryStore, runnerKit, scope, settle, sharedStore, sharedView, submit, testApp, within, type AppRequest
} from './runner-kit.ts'

// The async runner alone: a real memory run store, a real gate, a real app on loopback through an
// undici Pool; each test drives the app and reads what the store kept.

const idOf = (request: AppRequest | undefined): string | undefined => request?.headers['x-request-id'] as string | undefined
const hook = { url: new URL('http://127.0.0.1:9/hook'), secret: 'whsec-runner' }

t.test('a queued run goes to the app with its stored request, byte for byte; its record goes queued → running → succeeded', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app, { start: false })
  const body = Buffer.from([0x7b, 0x00, 0xff, 0xfe, 0x80, 0x0a, 0x7d])
  const headers = ['Content-Type', 'application/octet-stream', 'X-Custom', 'first', 'x-custom', 'second', 'x-request-id', 'exact']
  const queued = await submit(kit.store, { runId: 'exact', method: 'PUT', path: '/base/work?b=1&c=%20x&c=2', headers, body })
  t.same(queued.record, { run_id: 'exact', status: 'queued', created_at: queued.record.created_at })
  t.equal(kit.runner.active, 0, 'nothing taken before start')

  kit.runner.start()
  const request = await app.arrived(1)
  t.equal(request.method, 'PUT')
  t.equal(request.url, '/base/work?b=1&c=%20x&c=2', 'path and query as stored')
  t.same(request.rawHeaders, ['host', app.origin.slice('http://'.length), 'connection', 'keep-alive', ...headers, 'content-length', String(body.length)],
    'the stored headers, in order and case, between what undici adds')
  t.same(request.body, body, 'the body bytes')

  const running = await kit.store.records.get(scope, 'exact')
  t.equal(running.record.status, 'running')
  t.same(Object.keys(running.record), ['run_id', 'status', 'created_at', 'started_at', 'queue_time_ms'])
  t.equal(kit.runner.active, 1)
  t.equal(kit.inflight.count, 1, 'the drain counts it')
  t.equal(kit.gateInflight(), 1, 'it holds a slot')

  answer(request, 201, ' {"ok": true,  "n": [1, 2]}\n')
  const done = await ended(kit.store, 'exact')
  t.equal(done.record.status, 'succeeded')
  t.equal(done.record.status_code, 201)
  t.equal(done.resultJson, '{"ok": true,  "n": [1, 2]}', 'the result as the app sent it, trimmed')
  t.equal(done.record.error, undefined)
  t.equal(done.record.started_at, running.record.started_at)
  t.ok((done.record.run_time_ms ?? -1) >= 0)
  await within(kit.inflight.idle(), 'the run leaves the drain count')
  t.equal(kit.runner.active, 0)
  t.equal(kit.gateInflight(), 0, 'its slot is free')
  t.same(Object.fromEntries(kit.runsTotal.counts), { succeeded: 1 })
  t.same(kit.webhooks.submitted, [], 'no webhook asked for')
  t.same(kit.appCancels, [], 'an app request that ended by itself is not canceled')
  t.same(kit.internalErrors, [])
})

t.test('an SSE answer: each event is appended as it arrives, in order; the result is the array of their values', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'sse', method: 'GET', body: null, headers: ['accept', 'text/event-stream', 'x-request-id', 'sse'] })
  const request = await app.arrived(1)
  t.equal(request.headers['content-length'], undefined, 'no body sent')
  request.res.writeHead(201, { 'content-type': 'text/event-stream' })
  request.res.write('data: {"a":1}\n\n')
  t.equal(await eventKept(kit.store, 'sse', 0), '{"a":1}')
  request.res.write('event: x\nid: 7\ndata: two\ndata: lines\n\n: comment\n\n')
  t.equal(await eventKept(kit.store, 'sse', 1), 'two\nlines')
  t.equal((await kit.store.records.get(scope, 'sse')).record.status, 'running', 'still running between events')
  request.res.end('data: 3\n\n')
  const items = await itemsOf(kit.store, 'sse')
  t.same(items.slice(0, 3), [
    { type: 'event', n: 0, data: '{"a":1}' },
    { type: 'event', n: 1, data: 'two\nlines' },
    { type: 'event', n: 2, data: '3' }
  ])
  const done = (items[3] as RunEventItem & { type: 'done' }).view
  t.equal(items.length, 4, 'then done')
  t.equal(done.record.status, 'succeeded')
  t.equal(done.record.status_code, 200, 'a stream\'s status is 200, as a caller gets it')
  t.equal(done.resultJson, '[{"a":1},"two\\nlines",3]')
})

t.test('a 5xx answer fails the run with the app\'s status and body', async t => {
  const app = await testApp(t, request => { answer(request, 503, 'busy, come back', { 'content-type': 'text/plain' }) })
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'busy' })
  const done = await ended(kit.store, 'busy')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 503)
  t.equal(done.resultJson, '"busy, come back"')
  t.same(done.record.error, { message: 'app answered 503' })
  await within(kit.inflight.idle(), 'the run is over')
  t.same(Object.fromEntries(kit.runsTotal.counts), { failed: 1 })
  t.same(kit.appCancels, [])
})

t.test('an app that is unreachable fails the run 502', async t => {
  const origin = await deadOrigin()
  const kit = await runnerKit(t, undefined, { origin })
  await submit(kit.store, { runId: 'nobody' })
  const done = await ended(kit.store, 'nobody')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 502)
  t.equal(done.resultJson, '{"message":"app unreachable: connection refused"}')
  t.same(done.record.error, { message: 'app unreachable: connection refused' })
  await within(kit.inflight.idle(), 'the run is over')
  t.same(Object.fromEntries(kit.runsTotal.counts), { failed: 1 })
})

t.test('an app that dies mid-answer: a stream keeps the events so far, a plain body fails 502', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'half-body' })
  const first = await app.arrived(1)
  first.res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
  first.res.write('{"partial":')
  first.res.destroy()
  const body = await ended(kit.store, 'half-body')
  t.equal(body.record.status, 'failed')
  t.equal(body.record.status_code, 502)
  t.equal(body.resultJson, '{"message":"app unreachable: connection reset"}')
  t.same(body.record.error, { message: 'app unreachable: connection reset' })

  await submit(kit.store, { runId: 'half-stream', method: 'GET', body: null })
  const second = await app.arrived(2)
  second.res.writeHead(200, { 'content-type': 'text/event-stream' })
  second.res.write('data: 1\n\ndata: "two"\n\n')
  t.equal(await eventKept(kit.store, 'half-stream', 1), '"two"')
  await app.close() // the app dies
  const stream = await ended(kit.store, 'half-stream')
  t.equal(stream.record.status, 'failed')
  t.equal(stream.record.status_code, 502)
  t.equal(stream.resultJson, '[1,"two"]', 'the events it had sent')
  t.same(stream.record.error, { message: 'app unreachable: app failed mid-stream: connection reset' })
  await within(kit.inflight.idle(), 'both runs are over')
  t.same(Object.fromEntries(kit.runsTotal.counts), { failed: 2 })
  t.same(kit.appCancels, [], 'the app\'s own failure: it is not told')
})

t.test('a run canceled while running: its app request is cut, it ends canceled 499, the app is told once, the slot goes to the next run', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'stop-me' })
  await submit(kit.store, { runId: 'after' })
  const request = await app.arrived(1)
  t.equal(idOf(request), 'stop-me')
  const canceled = await kit.store.records.cancel(scope, 'stop-me')
  t.equal(canceled.record.status, 'canceled')
  await within(request.cut, 'the app request is cut')
  const done = await ended(kit.store, 'stop-me')
  t.equal(done.record.status, 'canceled')
  t.equal(done.record.status_code, 499)
  t.equal(done.resultJson, '{"message":"run canceled"}')
  t.same(done.record.error, { message: 'run canceled' })
  t.same(kit.appCancels, ['stop-me'])
  const next = await app.arrived(2)
  t.equal(idOf(next), 'after', 'the freed slot takes the next run')
  answer(next, 200, '{}')
  t.equal((await ended(kit.store, 'after')).record.status, 'succeeded')
  await within(kit.inflight.idle(), 'both runs are over')
  t.same(Object.fromEntries(kit.runsTotal.counts), { canceled: 1, succeeded: 1 })
  t.same(kit.appCancels, ['stop-me'], 'told once')
})

t.test('a run canceled while queued never reaches the app', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const kit = await runnerKit(t, app)
  const free = await holdSlot(kit.gate)
  await submit(kit.store, { runId: 'dropped' })
  await submit(kit.store, { runId: 'kept' })
  t.equal((await kit.store.records.cancel(scope, 'dropped')).record.status, 'canceled')
  free()
  t.equal(idOf(await app.arrived(1)), 'kept', 'the first request the app gets is the run after it')
  t.equal((await ended(kit.store, 'kept')).record.status, 'succeeded')
  await within(kit.inflight.idle(), 'the run is over')
  t.equal(app.requests.length, 1)
  t.same(Object.fromEntries(kit.runsTotal.counts), { succeeded: 1 }, 'a queued cancel is counted by its route, not the runner')
  t.same(kit.appCancels, [])
})

t.test('a run canceled between its take (which starts it) and its app request never reaches the app; the cancel stands', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const memory = await memoryStore(t)
  // the cancel lands while the runner is between the take and the app request (as it can on another replica)
  const shared = sharedStore(memory)
  const store: RunStore = {
    ...shared,
    queue: {
      ...shared.queue,
      start: async (run, startedAt) => {
        await memory.records.cancel(scope, run.runId)
        return await memory.queue.start(run, startedAt) ?? run // a shared store's start of a taken run does not look again
      }
    }
  }
  const kit = await runnerKit(t, app, { store })
  await submit(kit.store, { runId: 'canceled-early' })
  const view = await ended(kit.store, 'canceled-early')
  t.equal(view.record.status, 'canceled')
  t.equal(view.record.status_code, 499)
  await within(kit.inflight.idle(), 'the run is over')
  t.equal(app.requests.length, 0, 'never at the app')
  t.same(kit.appCancels, [], 'nor told to cancel what it never got')
  t.same(Object.fromEntries(kit.runsTotal.counts), { canceled: 1 })
})

t.test('DEADLINE_SECONDS cuts the app request: 504, counted as a deadline cancel, the app told', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app, { deadlineSeconds: 0.2 })
  await submit(kit.store, { runId: 'slow' })
  const request = await app.arrived(1)
  await within(request.cut, 'the app request is cut at the deadline')
  const done = await ended(kit.store, 'slow')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 504)
  t.equal(done.resultJson, '{"message":"request exceeded its deadline of 0.2s"}')
  t.same(done.record.error, { message: 'request exceeded its deadline of 0.2s' })
  t.ok((done.record.run_time_ms ?? 0) >= 195, `cut at the deadline (run_time_ms ${done.record.run_time_ms})`)
  t.same(Object.fromEntries(kit.cancels.counts), { deadline: 1 })
  t.same(kit.appCancels, ['slow'])
})

t.test('Cancel-After, counted from the submission, cuts a running run: 504 "deadline passed"', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app, { deadlineSeconds: 30 })
  const createdAt = Date.now() - 1800
  await submit(kit.store, { runId: 'bounded', createdAt, headers: ['cancel-after', '2s', 'x-request-id', 'bounded'] })
  const request = await app.arrived(1)
  t.equal(request.headers['cancel-after'], '2s', 'forwarded as stored')
  await within(request.cut, 'the app request is cut at its Cancel-After')
  const cutAt = Date.now()
  t.ok(cutAt - createdAt >= 1995, `cut ${cutAt - createdAt} ms after its submission`)
  const done = await ended(kit.store, 'bounded')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 504)
  t.equal(done.resultJson, '{"message":"deadline passed"}')
  t.same(Object.fromEntries(kit.cancels.counts), { deadline: 1 })
  t.same(kit.appCancels, ['bounded'])
})

t.test('a queued run past ASYNC_QUEUE_TTL_SECONDS fails 504 in the queue: never at the app, its webhook sent, counted queue_ttl', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const store = await memoryStore(t, { queueTtlSeconds: 0.3 })
  const kit = await runnerKit(t, app, { store, queueTtlSeconds: 0.3 })
  const free = await holdSlot(kit.gate)
  await submit(store, { runId: 'stale', webhook: hook })
  const [job] = await kit.webhooks.count(1)
  const view = await store.records.get(scope, 'stale')
  t.same(view.record, {
    run_id: 'stale', status: 'failed', created_at: view.record.created_at, completed_at: view.record.completed_at,
    status_code: 504, error: { message: 'expired in the queue' }, webhook: { status: 'pending', attempts: 0 }
  })
  t.equal(view.resultJson, '{"message":"expired in the queue"}')
  t.equal(job?.runId, 'stale')
  t.same(job?.scope, scope)
  t.equal(job?.target, hook)
  t.equal(job?.body, `{"run_id":"stale","status_code":504,"result":{"message":"expired in the queue"},"run_time_ms":0,"timestamp":"${view.record.completed_at}"}`)
  t.same(Object.fromEntries(kit.cancels.counts), { queue_ttl: 1 })
  t.same(Object.fromEntries(kit.runsTotal.counts), { failed: 1 })
  job?.onEnd?.('delivered', 1)
  await settle()
  t.same((await store.records.get(scope, 'stale')).record.webhook, { status: 'delivered', attempts: 1 }, 'the delivery\'s end is written on the record')
  free()
  await submit(store, { runId: 'fresh' })
  t.equal(idOf(await app.arrived(1)), 'fresh', 'the expired runs never reached the app')
})

t.test('a queued run whose Cancel-After passes fails 504 "deadline passed", counted as a deadline', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const kit = await runnerKit(t, app)
  const free = await holdSlot(kit.gate)
  const createdAt = Date.now() - 900
  await submit(kit.store, { runId: 'late', createdAt, headers: ['cancel-after', '1'] })
  const done = await ended(kit.store, 'late')
  t.ok(Date.now() - createdAt >= 1000, 'at its Cancel-After')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 504)
  t.equal(done.resultJson, '{"message":"deadline passed"}')
  t.equal(done.record.started_at, undefined, 'it never started')
  t.same(Object.fromEntries(kit.cancels.counts), { deadline: 1 })
  t.same(Object.fromEntries(kit.runsTotal.counts), { failed: 1 })
  t.same(kit.webhooks.submitted, [], 'no webhook asked for')
  free()
  await submit(kit.store, { runId: 'next' })
  t.equal(idOf(await app.arrived(1)), 'next', 'the expired run never reached the app')
})

t.test('a run taken after its queue TTL passed (its start written late) fails at its start and never reaches the app', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const kit = await runnerKit(t, app, { queueTtlSeconds: 1 }) // the store's own TTL is a day: the runner's check is the one that acts
  await submit(kit.store, { runId: 'too-old', createdAt: Date.now() - 2000 })
  const done = await ended(kit.store, 'too-old')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 504)
  t.equal(done.resultJson, '{"message":"expired in the queue"}')
  t.equal(done.record.run_time_ms, 0)
  await submit(kit.store, { runId: 'young' })
  t.equal(idOf(await app.arrived(1)), 'young')
  t.equal(app.requests.length, 1)
})

t.test('priority: queued runs start by urgency, then round robin across callers', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const kit = await runnerKit(t, app)
  const free = await holdSlot(kit.gate)
  const runs = [['a1', 5, 'a'], ['a2', 1, 'a'], ['a3', 1, 'a'], ['b1', 1, 'b'], ['c1', 0, 'c'], ['b2', 3, 'b']] as const
  for (const [runId, urgency, caller] of runs) await submit(kit.store, { runId, urgency, caller })
  free()
  await app.arrived(runs.length)
  t.same(app.requests.map(idOf), ['c1', 'a2', 'b1', 'a3', 'b2', 'a1'])
})

t.test('a waiting call of the same urgency goes before a queued run', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  const first = await holdSlot(kit.gate, 'x', 3)
  await submit(kit.store, { runId: 'same', urgency: 3 })
  const waiting = kit.gate.acquire(AbortSignal.timeout(5000), 3, 'y')
  first()
  const second = await within(waiting, 'the call gets the slot')
  t.equal((await kit.store.records.get(scope, 'same')).record.status, 'queued', 'the run waits behind the call')
  t.equal(app.requests.length, 0)
  second()
  t.equal(idOf(await app.arrived(1)), 'same', 'then the run goes')
})

t.test('a queued run more urgent than a waiting call goes first when a call frees the slot', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  const first = await holdSlot(kit.gate, 'x', 3)
  await submit(kit.store, { runId: 'urgent', urgency: 0 })
  await settle() // the runner took it, found no slot, gave it back, and waits on the gate (a memory take answers at once)
  t.equal(kit.store.queue.nextUrgency?.(), 0, 'queued again, next')
  const call = kit.gate.acquire(AbortSignal.timeout(5000), 3, 'y')
  first()
  const urgent = await app.arrived(1)
  t.equal(idOf(urgent), 'urgent', 'the run of urgency 0 went before the call of urgency 3')
  t.equal(kit.gate.waiting, 1, 'the call still waits')
  answer(urgent, 200, '{}')
  const release = await within(call, 'the call gets the slot once the run ends')
  release()
})

/** Which of a waiting call and the app's next request gets the freed slot first; the loser is let through after. */
async function firstOf (call: Promise<() => void>, nextRequest: Promise<AppRequest>): Promise<'call' | 'run'> {
  const winner = await within(Promise.race([call.then(() => 'call' as const), nextRequest.then(() => 'run' as const)]), 'the freed slot is taken')
  if (winner === 'call') (await call)()
  else answer(await nextRequest, 200, '{}')
  return winner
}

t.test('a queued run more urgent than a waiting call goes first when a run frees the slot (REPLICA_CONCURRENCY runs at the app)', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'running', urgency: 3 })
  const running = await app.arrived(1)
  await submit(kit.store, { runId: 'urgent', urgency: 0 })
  await settle()
  const call = kit.gate.acquire(AbortSignal.timeout(5000), 3, 'y')
  answer(running, 200, '{}')
  t.equal(await firstOf(call, app.arrived(2)), 'run', 'docs/controlling-work.md: a waiting call or run of urgency u starts before any waiting one of urgency greater than u')
  await within(Promise.all([call, app.arrived(2)]), 'both went')
})

t.test('a call that takes the slot while a run is being taken goes first; the run keeps its place and runs after', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'warm' })
  await ended(kit.store, 'warm')
  await within(kit.inflight.idle(), 'the first run is over')
  // the runner waits on its take; the submit hands it the run, and a call takes the slot before the runner gets it
  const submitted = submit(kit.store, { runId: 'raced' })
  const call = kit.gate.tryAcquire('caller')
  t.ok(call !== undefined, 'the call got the slot')
  await submitted
  await settle()
  t.equal((await kit.store.records.get(scope, 'raced')).record.status, 'queued', 'the run went back to the queue')
  t.equal(await kit.store.queue.queuedCount(), 1)
  call?.()
  t.equal(idOf(await app.arrived(2)), 'raced')
  t.equal((await ended(kit.store, 'raced')).record.status, 'succeeded')
})

t.test('REPLICA_CONCURRENCY: never more runs at the app than slots', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app, { replicaConcurrency: 2 })
  for (const runId of ['r1', 'r2', 'r3']) await submit(kit.store, { runId })
  const first = await app.arrived(1)
  await app.arrived(2)
  t.equal(kit.runner.active, 2)
  t.equal((await kit.store.records.get(scope, 'r3')).record.status, 'queued', 'the third waits for a slot')
  answer(first, 200, '{}')
  t.equal(idOf(await app.arrived(3)), 'r3', 'and goes once one frees')
  t.equal(app.requests.length, 3)
})

t.test(`with no limit, at most ${UNLIMITED_PARALLEL} runs at the app at once; the rest stay queued`, async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app, { replicaConcurrency: 0 })
  for (let i = 0; i <= UNLIMITED_PARALLEL; i++) await submit(kit.store, { runId: `r${i}` })
  const held = await app.arrived(UNLIMITED_PARALLEL)
  t.equal(kit.runner.active, UNLIMITED_PARALLEL)
  t.equal(app.requests.length, UNLIMITED_PARALLEL)
  t.equal((await kit.store.records.get(scope, `r${UNLIMITED_PARALLEL}`)).record.status, 'queued')
  t.equal(await kit.store.queue.queuedCount(), 1)
  answer(held, 200, '{}')
  t.equal(idOf(await app.arrived(UNLIMITED_PARALLEL + 1)), `r${UNLIMITED_PARALLEL}`)
  for (const request of app.requests) if (request !== held) answer(request, 200, '{}')
  await within(kit.inflight.idle(), 'every run is over')
  t.same(Object.fromEntries(kit.runsTotal.counts), { succeeded: UNLIMITED_PARALLEL + 1 })
})

t.test('CALLER_MAX_INFLIGHT (memory queue): a capped caller\'s run waits in its place while another caller\'s goes', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app, { replicaConcurrency: 3, callerLimit: 1 })
  const aCall = await holdSlot(kit.gate, 'a')
  await submit(kit.store, { runId: 'a1', caller: 'a' })
  await submit(kit.store, { runId: 'b1', caller: 'b' })
  t.equal(idOf(await app.arrived(1)), 'b1')
  t.equal((await kit.store.records.get(scope, 'a1')).record.status, 'queued', 'a holds its one slot: its run waits')
  aCall()
  t.equal(idOf(await app.arrived(2)), 'a1', 'a\'s call ended: its run goes')
  t.equal(kit.gate.capped('a'), true, 'and now holds a\'s one slot')
})

t.test('CALLER_MAX_INFLIGHT with a shared store: a capped caller\'s run stays queued for other replicas, and runs here as the caller\'s call ends', async t => {
  const app = await testApp(t)
  const memory = await memoryStore(t)
  const kit = await runnerKit(t, app, { replicaConcurrency: 3, callerLimit: 1, store: sharedStore(memory) })
  const aCall = await holdSlot(kit.gate, 'a')
  await submit(memory, { runId: 'a1', caller: 'a' })
  await submit(memory, { runId: 'b1', caller: 'b' })
  t.equal(idOf(await app.arrived(1)), 'b1', 'the run after it goes')
  await settle()
  t.equal((await memory.records.get(scope, 'a1')).record.status, 'queued', 'not started')
  t.equal(await memory.queue.queuedCount(), 1, 'and still in the queue, not held here')
  aCall()
  t.equal(idOf(await app.arrived(2)), 'a1', 'first for the slot a\'s call left')
  t.equal(app.requests.length, 2)
})

t.test('a shared store: no run is taken ahead for a busy slot; a slot that frees takes the next run then', async t => {
  const app = await testApp(t)
  const memory = await memoryStore(t)
  await runnerKit(t, app, { replicaConcurrency: 2, store: sharedStore(memory) })
  for (const runId of ['r1', 'r2', 'r3', 'r4', 'r5']) await submit(memory, { runId })
  const first = await app.arrived(1)
  await app.arrived(2)
  await settle()
  t.equal(await memory.queue.queuedCount(), 3, 'r3, r4 and r5 wait in the queue')
  await submit(memory, { runId: 'urgent', urgency: 0 })
  answer(first, 200, '{}')
  t.equal(idOf(await app.arrived(3)), 'urgent', 'the run queued last but more urgent takes the freed slot')
})

t.test('drain with a shared store: no run is taken after it starts; the queued ones stay queued for the other replicas', async t => {
  const app = await testApp(t)
  const memory = await memoryStore(t)
  const kit = await runnerKit(t, app, { replicaConcurrency: 2, store: sharedStore(memory) })
  for (const runId of ['r1', 'r2', 'r3', 'r4', 'r5']) await submit(memory, { runId })
  const running = [await app.arrived(1), await app.arrived(2)]
  await settle()
  const draining = kit.runner.drain(new Promise(() => {}))
  await settle()
  for (const request of running) answer(request, 200, '{}')
  t.equal(await within(draining, 'the drain ends'), true, 'once the runs under way end')
  t.same(await Promise.all(['r3', 'r4', 'r5'].map(async id => (await memory.records.get(scope, id)).record.status)), ['queued', 'queued', 'queued'])
  const again = []
  for (let i = 0; i < 3; i++) again.push((await within(memory.queue.take(AbortSignal.timeout(1000)), 'take')).runId)
  t.same(again.sort(), ['r3', 'r4', 'r5'], 'another replica can take each')
  t.equal(app.requests.length, 2)
})

t.test('drain (memory store): queued runs still run within the grace period, then true', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'first' })
  await submit(kit.store, { runId: 'second' })
  const first = await app.arrived(1)
  let drained = false
  const draining = kit.runner.drain(new Promise(() => {})).then(clean => { drained = true; return clean })
  answer(first, 200, '{}')
  const second = await app.arrived(2)
  t.equal(drained, false, 'the queued run is waited for')
  answer(second, 200, '{}')
  t.equal(await within(draining, 'the drain ends'), true)
  t.equal((await kit.store.records.get(scope, 'second')).record.status, 'succeeded')
})

t.test('drain: a run at the app when the grace period ends fails 503 "replica stopped"; queued ones stay queued; false', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'long' })
  await submit(kit.store, { runId: 'waiting' })
  const request = await app.arrived(1)
  let over = (): void => {}
  const graceOver = new Promise<void>(resolve => { over = resolve })
  const draining = kit.runner.drain(graceOver)
  over()
  t.equal(await within(draining, 'the drain ends'), false, 'a run was cut')
  await within(request.cut, 'its app request is cut')
  const done = await ended(kit.store, 'long')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 503)
  t.equal(done.resultJson, '{"message":"replica stopped"}')
  t.same(kit.appCancels, ['long'])
  t.equal(kit.runner.active, 0)
  t.equal((await kit.store.records.get(scope, 'waiting')).record.status, 'queued')
  t.equal(app.requests.length, 1)
})

t.test('drain with nothing under way: true at once', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  t.equal(await within(kit.runner.drain(new Promise(() => {})), 'the drain ends'), true)
})

/** The memory store with some of its records' methods replaced. */
function withRecords (store: RunStore, replaced: Partial<RunRecords>): RunStore {
  const real = store.records
  const records: RunRecords = {
    get: async (s, id) => await real.get(s, id),
    cancel: async (s, id) => await real.cancel(s, id),
    open: async run => await real.open(run),
    appendEvent: (run, n, data) => { real.appendEvent(run, n, data) },
    finish: async (run, outcome, keep, deliveryOf) => await real.finish(run, outcome, keep, deliveryOf),
    webhookDone: async (s, id, status, attempts) => { await real.webhookDone(s, id, status, attempts) },
    follow: async (s, id, after, signal) => await real.follow(s, id, after, signal),
    ...replaced
  }
  return { ...sharedStore(store), queue: store.queue, records }
}

t.test('a store write that throws as an event arrives fails that run only, 500, reported once; its app request is cut', async t => {
  const app = await testApp(t)
  const memory = await memoryStore(t)
  const broken = new Error('append broke')
  const store = withRecords(memory, {
    appendEvent: (run, n, data) => {
      if (run.runId === 'bad') throw broken
      memory.records.appendEvent(run, n, data)
    }
  })
  const kit = await runnerKit(t, app, { store, replicaConcurrency: 2 })
  await submit(memory, { runId: 'bad', method: 'GET', body: null })
  await submit(memory, { runId: 'good', method: 'GET', body: null })
  const [bad, good] = [await app.arrived(1), await app.arrived(2)]
  for (const request of [bad, good]) {
    request.res.writeHead(200, { 'content-type': 'text/event-stream' })
    request.res.write('data: 1\n\n')
  }
  await within(bad.cut, 'the bad run\'s app request is cut')
  good.res.end('data: 2\n\n')
  const failed = await ended(memory, 'bad')
  t.equal(failed.record.status, 'failed')
  t.equal(failed.record.status_code, 500)
  t.equal(failed.resultJson, '{"message":"internal error"}')
  t.same(failed.record.error, { message: 'internal error' })
  const fine = await ended(memory, 'good')
  t.equal(fine.record.status, 'succeeded')
  t.equal(fine.resultJson, '[1,2]')
  t.same(kit.internalErrors, [{ error: broken, fields: { runId: 'bad' } }])
})

t.test('an exception while its end is written: reported, and the run ends failed 500', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{"fine":true}') })
  const memory = await memoryStore(t)
  const broken = new TypeError('finish broke')
  let throws = 1
  const store = withRecords(memory, {
    finish: async (run, outcome, keep, deliveryOf) => {
      if (throws-- > 0) throw broken
      return await memory.records.finish(run, outcome, keep, deliveryOf)
    }
  })
  const kit = await runnerKit(t, app, { store })
  await submit(memory, { runId: 'unlucky', webhook: hook })
  const done = await ended(memory, 'unlucky')
  t.equal(done.record.status, 'failed')
  t.equal(done.record.status_code, 500)
  t.equal(done.resultJson, '{"message":"internal error"}')
  t.same(done.record.error, { message: 'internal error' })
  t.same(kit.internalErrors, [{ error: broken, fields: { runId: 'unlucky' } }])
  const [job] = await kit.webhooks.count(1)
  t.equal(job?.body, `{"run_id":"unlucky","status_code":500,"result":{"message":"internal error"},"run_time_ms":0,"timestamp":"${done.record.completed_at}"}`, 'its webhook says how it ended')
  await within(kit.inflight.idle(), 'the run is over')
  t.same(Object.fromEntries(kit.runsTotal.counts), { failed: 1 })
})

t.test('its webhook: the body from the final record, the submitter\'s trace, bounded by WEBHOOK_MAX_BODY_BYTES; its end written on the record', async t => {
  const app = await testApp(t, request => { answer(request, 200, request.url === '/big' ? `"${'x'.repeat(100)}"` : '{"answer": 42}') })
  const kit = await runnerKit(t, app, { webhookMaxBodyBytes: 64 })
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
  await submit(kit.store, { runId: 'hooked', webhook: hook, headers: ['traceparent', traceparent, 'tracestate', 'k=v'] })
  const [job] = await kit.webhooks.count(1)
  const done = await kit.store.records.get(scope, 'hooked')
  t.equal(job?.body, `{"run_id":"hooked","status_code":200,"result":{"answer": 42},"run_time_ms":${done.record.run_time_ms},"timestamp":"${done.record.completed_at}"}`)
  t.same(job?.trace, { traceparent, tracestate: 'k=v' })
  t.equal(job?.target, hook)
  t.same(done.record.webhook, { status: 'pending', attempts: 0 })
  job?.onEnd?.('failed', 3)
  await settle()
  t.same((await kit.store.records.get(scope, 'hooked')).record.webhook, { status: 'failed', attempts: 3 })

  await submit(kit.store, { runId: 'big', path: '/big', webhook: hook })
  const [, big] = await kit.webhooks.count(2)
  const bigDone = await kit.store.records.get(scope, 'big')
  t.equal(bigDone.resultJson, `"${'x'.repeat(100)}"`, 'the record keeps the whole result')
  t.equal(big?.body, `{"run_id":"big","status_code":200,"result":null,"run_time_ms":${bigDone.record.run_time_ms},"timestamp":"${bigDone.record.completed_at}","truncated":true}`)
  t.same(kit.webhooks.held, [], 'memory holds no deliveries')
})

t.test('tracing: the app request carries the run\'s client span under the submitter\'s trace; the span ends with the outcome', async t => {
  const app = await testApp(t, request => { answer(request, request.url === '/fail' ? 503 : 200, '{}') })
  const spans: Array<{ name: string, parent: TraceContext | undefined, attributes: TraceAttributes, ended?: [number, string | undefined] }> = []
  const tracer: Tracer = {
    startCall: () => { throw new Error('no call here') },
    startClient: (name, parent, attributes) => {
      const span: (typeof spans)[number] = { name, parent, attributes }
      spans.push(span)
      const n = spans.length
      return { context: { traceparent: `00-${'1'.repeat(32)}-${String(n).padStart(16, '0')}-01` }, end: (status, error) => { span.ended = [status, error] } }
    },
    close: async () => {}
  }
  const kit = await runnerKit(t, app, { tracer })
  const submitter = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
  await submit(kit.store, { runId: 'traced', headers: ['x-a', '1', 'traceparent', submitter, 'x-b', '2'] })
  await ended(kit.store, 'traced')
  const request = app.requests[0]
  t.same(request?.rawHeaders.slice(4, -2), ['x-a', '1', 'x-b', '2', 'traceparent', `00-${'1'.repeat(32)}-0000000000000001-01`], 'the span\'s context replaces the stored one')
  t.same(spans[0], { name: 'POST', parent: { traceparent: submitter, tracestate: undefined }, attributes: { 'http.request.method': 'POST', run_id: 'traced' }, ended: [200, undefined] })
  await submit(kit.store, { runId: 'untraced-fail', path: '/fail' })
  await ended(kit.store, 'untraced-fail')
  t.same(spans[1]?.parent, undefined, 'a run without a trace starts one')
  t.same(spans[1]?.ended, [503, 'app answered 503'])
})

t.test('a lost run (the store failed it for another replica): counted, its webhook sent', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app, { start: false })
  await submit(kit.store, { runId: 'orphan', webhook: hook })
  const run: TakenRun = await within(kit.store.queue.take(AbortSignal.timeout(5000)), 'take')
  const view: RunView = {
    record: { run_id: 'orphan', status: 'failed', created_at: new Date(run.createdAt).toISOString(), completed_at: '2030-01-01T00:00:00.000Z', status_code: 502, error: { message: 'replica lost' } },
    resultJson: '{"message":"replica lost"}',
    async: true
  }
  kit.runner.lost(run, view)
  t.same(Object.fromEntries(kit.runsTotal.counts), { failed: 1 })
  t.equal(kit.webhooks.submitted[0]?.body, '{"run_id":"orphan","status_code":502,"result":{"message":"replica lost"},"run_time_ms":0,"timestamp":"2030-01-01T00:00:00.000Z"}')
})

t.test('a take that fails (the store unreachable): the runner waits at most 1 s, or until the store says it is back', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const memory = await memoryStore(t)
  let failures = 0
  let failed = (): void => {}
  const firstFailure = new Promise<void>(resolve => { failed = resolve })
  const queue = { ...sharedView(memory.queue), shared: false }
  queue.take = async signal => {
    if (failures++ === 0) {
      failed()
      throw new RunStoreUnavailableError('down')
    }
    return await memory.queue.take(signal)
  }
  const kit = await runnerKit(t, app, { store: { ...sharedStore(memory), queue } })
  await within(firstFailure, 'the first take fails')
  await submit(memory, { runId: 'after-outage' }) // in memory at once: no turn of the event loop since the failure
  t.equal(failures, 1, 'the runner waits: no take since the failed one')
  kit.runner.availability(true)
  // a next tick runs after every promise the change settles, before any timer: the 1 s wait cannot have fired
  await new Promise<void>(resolve => { process.nextTick(resolve) })
  t.equal(failures, 2, 'taken again as the store came back, in the same turn, not after the 1 s wait')
  await app.arrived(1)
  t.equal(failures, 2, 'one failed take, then the one that brought the run')
  t.equal(kit.runner.active, 1)
})

t.test('close() while REPLICA_CONCURRENCY runs are at the app stops taking and returns', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await submit(kit.store, { runId: 'held' })
  await app.arrived(1)
  const closing = kit.runner.close()
  const returned = await within(closing, 'close returns', 1000).then(() => true, () => false)
  t.ok(returned, 'close() returned within 1 s with the run still at the app')
  await app.close() // the held run ends: close returns now either way
  await within(closing, 'close returns once the run left the app')
})

t.test('close: the take under way is abandoned, no run is taken after', async t => {
  const app = await testApp(t)
  const kit = await runnerKit(t, app)
  await within(kit.runner.close(), 'the runner stops')
  await submit(kit.store, { runId: 'after-close' })
  const take = kit.store.queue.take(AbortSignal.timeout(1000))
  t.equal((await within(take, 'take')).runId, 'after-close', 'left in the queue for whoever takes it')
  t.equal(app.requests.length, 0)
})
