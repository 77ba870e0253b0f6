import t from 'tap'
import { RunCanceledError, RunFinishedError, RunNotFoundError, RunStoreUnavailableError } from '../../../src/errors.ts'
import { CallsByRunId } from '../../../src/call/calls-by-run-id.ts'
import type { RunRecording } from '../../../src/call/stage-call.ts'
import { createRunCancel } from '../../../src/runs/routes/run-cancel.ts'
import { CANCELED_RESULT, recordedRun } from '../../../src/runs/run-record.ts'
import type { RunStatus, RunView, TakenRun } from '../../../src/runs/run-data.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import type { CancelCause } from '../../../src/shared/metric-contracts.ts'
import { countingCounter, fakeCalls, type FakeCall } from '../../helpers/fake-call.ts'
import { finishedRun, iso, memoryStore, OTHER_SCOPE, queuedRun, refusal, runningRun, runRoute, SCOPE, storeWith, unreachableStore, untouchableStore } from './run-routes-kit.ts'

// `POST …/_runs/{id}/cancel` (docs/runs.md): a plain call in flight here, an async run queued or
// running, a recorded sync call (its Idempotency-Key) where it runs; 409 finished, 404 nowhere.

const call = await fakeCalls(t)

interface Canceling {
  readonly cancel: ReturnType<typeof createRunCancel>
  readonly calls: CallsByRunId
  readonly runsTotal: ReturnType<typeof countingCounter<RunStatus>>
  readonly cancels: ReturnType<typeof countingCounter<CancelCause>>
}

function canceling (store: RunStore): Canceling {
  const calls = new CallsByRunId()
  const runsTotal = countingCounter<RunStatus>()
  const cancels = countingCounter<CancelCause>()
  return { cancel: createRunCancel({ store, runsTotal, calls, cancels }), calls, runsTotal, cancels }
}

/** A `/v4/p1/a1/work` call in flight with run id `runId`, known to `calls`. */
async function inFlight (calls: CallsByRunId, runId: string, path = '/v4/p1/a1/work'): Promise<FakeCall> {
  const c = await call({ method: 'POST', path, headers: { 'x-request-id': runId } })
  calls.add(c)
  return c
}

/** The cancel request itself. */
async function cancelRequest (runId: string): Promise<FakeCall> {
  return await call({ method: 'POST', path: `/v4/p1/a1/_runs/${runId}/cancel`, headers: { 'x-request-id': 'canceler' } })
}

t.test('a plain call in flight here: canceled at once, the store not asked; it gets 499, the canceler 200', async t => {
  const { cancel, calls, runsTotal, cancels } = canceling(untouchableStore(memoryStore(t)))
  const target = await inFlight(calls, 'plain-1')
  const c = await cancelRequest('plain-1')
  await cancel(c, runRoute('cancel', 'plain-1'))
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, '{"run_id":"plain-1","status":"canceled"}')
  t.equal(got?.headers['x-request-id'], 'canceler', 'the cancel request\'s own run id')
  t.equal(got?.headers['content-type'], 'application/json; charset=utf-8')
  t.type(target.signal.reason, RunCanceledError, 'the call aborted')
  const targetGot = await target.got
  t.equal(targetGot?.status, 499)
  t.equal(targetGot?.body, '{"message":"run canceled"}')
  t.equal(targetGot?.headers['x-request-id'], 'plain-1')
  t.same([...cancels.counts], [['request', 1]])
  t.same([...runsTotal.counts], [], 'a plain call is no run')
})

t.test('a plain call already at the app: its relay is told, the cancel does not answer it', async t => {
  const { cancel, calls, cancels } = canceling(untouchableStore(memoryStore(t)))
  const target = await inFlight(calls, 'plain-2')
  target.forwarded = true
  const reasons: Error[] = []
  target.onAbort({ abortFor: reason => { reasons.push(reason) } })
  const c = await cancelRequest('plain-2')
  await cancel(c, runRoute('cancel', 'plain-2'))
  t.equal((await c.got)?.body, '{"run_id":"plain-2","status":"canceled"}')
  t.equal(reasons.length, 1)
  t.type(reasons[0], RunCanceledError)
  t.same(target.answered, [], 'the relay answers it, not the cancel')
  t.equal(target.res.headersSent, false)
  t.same([...cancels.counts], [['request', 1]])
  target.res.end()
})

t.test('a plain call of another app, or already answered, is not canceled: 404', async t => {
  const { cancel, calls, cancels } = canceling(memoryStore(t))
  const otherApp = await inFlight(calls, 'plain-3', '/v4/p1/a2/work')
  const c = await cancelRequest('plain-3')
  const { error, got } = await refusal(c, cancel(c, runRoute('cancel', 'plain-3')))
  t.type(error, RunNotFoundError)
  t.equal(got?.status, 404)
  t.equal(got?.body, '{"message":"no such run"}')
  t.equal(otherApp.signal.aborted, false)

  const answered = await inFlight(calls, 'plain-4')
  answered.res.end('done')
  await answered.got
  const again = await cancelRequest('plain-4')
  t.type((await refusal(again, cancel(again, runRoute('cancel', 'plain-4')))).error, RunNotFoundError)
  t.equal(answered.signal.aborted, false)
  t.same([...cancels.counts], [])
  otherApp.res.end()
})

t.test('a plain call on another replica sharing the store: the store cancels it there', async t => {
  const asked: string[] = []
  const store = storeWith(memoryStore(t), { cancelCall: async (scope, runId) => { asked.push(`${scope.projectId}/${scope.appName}/${runId}`); return true } })
  const { cancel, cancels, runsTotal } = canceling(store)
  const c = await cancelRequest('remote-1')
  await cancel(c, runRoute('cancel', 'remote-1'))
  t.equal((await c.got)?.body, '{"run_id":"remote-1","status":"canceled"}')
  t.same(asked, ['p1/a1/remote-1'])
  t.same([...cancels.counts], [['request', 1]])
  t.same([...runsTotal.counts], [])
})

t.test('nothing with that id anywhere: 404, nothing counted', async t => {
  const { cancel, cancels, runsTotal } = canceling(memoryStore(t))
  const c = await cancelRequest('nobody')
  const { error, got } = await refusal(c, cancel(c, runRoute('cancel', 'nobody')))
  t.type(error, RunNotFoundError)
  t.equal(got?.status, 404)
  t.equal(got?.headers['x-request-id'], 'canceler')
  t.same([...cancels.counts], [])
  t.same([...runsTotal.counts], [])
})

t.test('a queued async run: canceled, never taken; 200 with its record; counted as a canceled run', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  await queuedRun(store, 'q1', base)
  const { cancel, cancels, runsTotal } = canceling(store)
  const c = await cancelRequest('q1')
  await cancel(c, runRoute('cancel', 'q1'))
  const { record } = await store.records.get(SCOPE, 'q1')
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, `{"run_id":"q1","status":"canceled","created_at":"${iso(base)}","completed_at":"${record.completed_at as string}","error":{"message":"run canceled"}}`)
  t.equal(got?.headers['x-request-id'], 'canceler')
  t.equal(await store.queue.queuedCount(), 0, 'no longer waits')
  t.same([...cancels.counts], [['request', 1]])
  t.same([...runsTotal.counts], [['canceled', 1]])
})

t.test('a running async run: canceled, its sidecar told; the run is counted where it ran, not here', async t => {
  const store = memoryStore(t)
  const heard: string[] = []
  store.listen({ canceled: (scope, runId) => { heard.push(`${scope.appName}/${runId}`) }, lost: () => {}, expired: () => {}, availability: () => {} })
  const base = Date.now()
  await runningRun(store, 'r1', base)
  const { cancel, cancels, runsTotal } = canceling(store)
  const c = await cancelRequest('r1')
  await cancel(c, runRoute('cancel', 'r1'))
  const { record } = await store.records.get(SCOPE, 'r1')
  t.equal((await c.got)?.body, `{"run_id":"r1","status":"canceled","created_at":"${iso(base)}","started_at":"${iso(base + 5)}",` +
    `"completed_at":"${record.completed_at as string}","queue_time_ms":5,"run_time_ms":${record.run_time_ms as number},"status_code":499,` +
    `"result":${CANCELED_RESULT},"error":{"message":"run canceled"}}`)
  t.same(heard, ['a1/r1'])
  t.same([...cancels.counts], [['request', 1]])
  t.same([...runsTotal.counts], [])
})

t.test('a finished run: 409, nothing changed or counted', async t => {
  const store = memoryStore(t)
  const done = await finishedRun(store, 'f1')
  await queuedRun(store, 'c1')
  await store.records.cancel(SCOPE, 'c1')
  const { cancel, cancels, runsTotal } = canceling(store)
  for (const runId of ['f1', 'c1']) {
    const c = await cancelRequest(runId)
    const { error, got } = await refusal(c, cancel(c, runRoute('cancel', runId)))
    t.type(error, RunFinishedError, runId)
    t.equal(got?.status, 409, runId)
    t.equal(got?.body, '{"message":"run already finished"}', runId)
  }
  t.same((await store.records.get(SCOPE, 'f1')).record, done.record)
  t.same([...cancels.counts], [])
  t.same([...runsTotal.counts], [])
})

t.test('another app\'s run is not found: 404', async t => {
  const store = memoryStore(t)
  await queuedRun(store, 'mine', Date.now(), OTHER_SCOPE)
  const { cancel } = canceling(store)
  const c = await cancelRequest('mine')
  t.type((await refusal(c, cancel(c, runRoute('cancel', 'mine')))).error, RunNotFoundError)
  t.equal((await store.records.get(OTHER_SCOPE, 'mine')).record.status, 'queued')
})

t.test('a store that cannot be reached: 503 with Retry-After', async t => {
  const { cancel, cancels } = canceling(unreachableStore(memoryStore(t)))
  const c = await cancelRequest('q1')
  const { error, got } = await refusal(c, cancel(c, runRoute('cancel', 'q1')))
  t.type(error, RunStoreUnavailableError)
  t.equal(got?.status, 503)
  t.equal(got?.headers['retry-after'], '1')
  t.same([...cancels.counts], [])
})

/** A recorded sync call (an Idempotency-Key) running here: its run claimed with its key, its call in flight. */
async function recordedCall (store: RunStore, calls: CallsByRunId, runId: string, createdAt: number): Promise<{ run: TakenRun, target: FakeCall }> {
  const run = recordedRun({ scope: SCOPE, runId, request: { method: 'POST', path: '/work', headers: [], body: null }, webhook: undefined, createdAt })
  if (await store.keys.claim(SCOPE, `slot-${runId}`, { runId, digest: 'd', async: false }, run) !== undefined) throw new Error(`the key of ${runId} was held`)
  const target = await inFlight(calls, runId)
  const recording: RunRecording = () => { throw new Error('not recorded in these tests') }
  target.recording = recording
  target.forwarded = true
  return { run, target }
}

t.test('a recorded sync call running here: canceled where it runs; answered with the end it wrote', async t => {
  const store = memoryStore(t)
  const { cancel, calls, cancels, runsTotal } = canceling(store)
  const base = Date.now()
  const { run, target } = await recordedCall(store, calls, 'k1', base)
  let ended: Promise<RunView> | undefined
  target.onAbort({
    abortFor: reason => {
      t.type(reason, RunCanceledError)
      // its sidecar writes its end as its app request is cut
      ended = store.records.finish(run, { status: 'canceled', statusCode: 499, resultJson: CANCELED_RESULT, runTimeMs: 3, error: 'run canceled', completedAt: base + 9 })
    }
  })
  const c = await cancelRequest('k1')
  await cancel(c, runRoute('cancel', 'k1'))
  t.ok(ended !== undefined, 'the call was aborted')
  await ended
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, `{"run_id":"k1","status":"canceled","created_at":"${iso(base)}","started_at":"${iso(base)}","completed_at":"${iso(base + 9)}",` +
    `"queue_time_ms":0,"run_time_ms":3,"status_code":499,"result":${CANCELED_RESULT},"error":{"message":"run canceled"}}`)
  t.same(target.answered, [], 'not answered as a plain call')
  t.same([...cancels.counts], [['request', 1]])
  t.same([...runsTotal.counts], [], 'it had started: counted where it ran')
  target.res.end()
})

t.test('a recorded sync call whose end is not written within a second: answered as it will end', async t => {
  const store = memoryStore(t)
  const { cancel, calls, cancels } = canceling(store)
  const base = Date.now()
  const { target } = await recordedCall(store, calls, 'k2', base)
  let aborted = 0
  target.onAbort({ abortFor: () => { aborted++ } })
  const c = await cancelRequest('k2')
  const before = Date.now()
  await cancel(c, runRoute('cancel', 'k2'))
  t.ok(Date.now() - before >= 1000, 'it waited a second for the end')
  const got = await c.got
  const answer = JSON.parse(got?.body ?? '{}') as Record<string, unknown>
  t.same(Object.keys(answer), ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'result', 'error'])
  t.match(answer, { run_id: 'k2', status: 'canceled', created_at: iso(base), started_at: iso(base), queue_time_ms: 0, status_code: 499, result: { message: 'run canceled' }, error: { message: 'run canceled' } })
  t.ok(Date.parse(answer.completed_at as string) >= before + 1000, 'completed as the wait ended')
  t.equal(aborted, 1)
  t.equal((await store.records.get(SCOPE, 'k2')).record.status, 'running', 'its end is still its sidecar\'s to write')
  t.same([...cancels.counts], [['request', 1]])
  target.res.end()
})

t.test('a recorded sync call forgotten with its key as it is canceled (it never reached the app): answered canceled at once', async t => {
  const store = memoryStore(t)
  let reads = 0
  const counted = storeWith(store, { records: { get: async (scope, runId) => { reads++; return await store.records.get(scope, runId) } } })
  const { cancel, calls } = canceling(counted)
  const base = Date.now()
  const { target } = await recordedCall(store, calls, 'k3', base)
  let dropped: Promise<void> | undefined
  target.onAbort({ abortFor: () => { dropped = store.keys.drop(SCOPE, 'slot-k3', 'k3', true) } })
  const c = await cancelRequest('k3')
  await cancel(c, runRoute('cancel', 'k3'))
  await dropped
  // the record, then a look or two that finds it gone: not a look every 20 ms through the 1 s wait for its end
  t.ok(reads >= 2 && reads <= 3, `no wait for an end that will never be written (${reads} reads)`)
  const answer = JSON.parse((await c.got)?.body ?? '{}') as Record<string, unknown>
  t.match(answer, { run_id: 'k3', status: 'canceled', status_code: 499, error: { message: 'run canceled' } })
  await t.rejects(store.records.get(SCOPE, 'k3'), RunNotFoundError)
  target.res.end()
})

t.test('a recorded sync call in flight nowhere (it ended meanwhile): 409', async t => {
  const store = memoryStore(t)
  const { cancel, cancels } = canceling(store)
  const run = recordedRun({ scope: SCOPE, runId: 'k4', request: { method: 'POST', path: '/work', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
  await store.keys.claim(SCOPE, 'slot-k4', { runId: 'k4', digest: 'd', async: false }, run)
  const c = await cancelRequest('k4')
  const { error, got } = await refusal(c, cancel(c, runRoute('cancel', 'k4')))
  t.type(error, RunFinishedError)
  t.equal(got?.status, 409)
  t.same([...cancels.counts], [])
})

t.test('a recorded sync call that has ended: 409, its call (still closing) not aborted', async t => {
  const store = memoryStore(t)
  const { cancel, calls } = canceling(store)
  const base = Date.now()
  const { run, target } = await recordedCall(store, calls, 'k5', base)
  await store.records.finish(run, { status: 'succeeded', statusCode: 200, resultJson: '{}', runTimeMs: 1, error: undefined, completedAt: base + 1 })
  const c = await cancelRequest('k5')
  t.type((await refusal(c, cancel(c, runRoute('cancel', 'k5')))).error, RunFinishedError)
  t.equal(target.signal.aborted, false)
  target.res.end()
})

t.test('a canceler that left is not answered; the cancel is made and counted', async t => {
  const store = memoryStore(t)
  await queuedRun(store, 'q9')
  const { cancel, calls, cancels } = canceling(store)
  const target = await inFlight(calls, 'plain-9')
  for (const runId of ['q9', 'plain-9']) {
    const c = await cancelRequest(runId)
    const closed = new Promise(resolve => c.res.once('close', resolve))
    c.leave()
    await closed
    await cancel(c, runRoute('cancel', runId))
    t.equal(await c.got, undefined, runId)
    t.equal(c.res.headersSent, false, runId)
  }
  t.equal((await store.records.get(SCOPE, 'q9')).record.status, 'canceled')
  t.equal((await target.got)?.status, 499)
  t.same([...cancels.counts], [['request', 2]])
})
