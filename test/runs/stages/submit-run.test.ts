import { once } from 'node:events'
import t from 'tap'
import { AsyncQueueFullError, RunStoreUnavailableError } from '../../../src/errors.ts'
import type { RequestHeaderRules } from '../../../src/call/forward-headers.ts'
import type { RunStatus, TakenRun } from '../../../src/runs/run-data.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import { createIdempotency, idempotencyKeyOf } from '../../../src/runs/stages/claim-key.ts'
import { queuedBody } from '../../../src/runs/stages/queued-answer.ts'
import { createRunSubmit, wantsAsync } from '../../../src/runs/stages/submit-run.ts'
import type { CallTrace, TraceContext } from '../../../src/shared/trace-contracts.ts'
import { countingCounter, type FakeCall, type FakeCallOptions, fakeCalls } from '../../helpers/fake-call.ts'
import { memoryStore, SCOPE, storeWith, unavailable, watchedLogger, watchedReports } from './stage-kit.ts'

const call = await fakeCalls(t)

const FORWARD_ALL: RequestHeaderRules = { dropAuthorization: false, dropAcceptEncoding: false, upgrade: false }
const JSON_TYPE = 'application/json; charset=utf-8'

/** An async call as the stages before this one leave it: its body the request's stream. */
async function asyncCall (runId: string, options: FakeCallOptions = {}): Promise<FakeCall> {
  const c = await call({ ...options, headers: { ...options.headers, 'x-request-id': runId } })
  c.async = true
  c.body = c.req
  return c
}

const take = async (store: RunStore): Promise<TakenRun> => await store.queue.take(AbortSignal.timeout(5000))

/** The value of `name` in a flat [name, value, …] list (undefined: absent). */
function headerIn (headers: readonly string[], name: string): string | undefined {
  for (let i = 0; i < headers.length; i += 2) if (headers[i]?.toLowerCase() === name) return headers[i + 1]
  return undefined
}

t.test('wantsAsync: ?async=true, or respond-async among the preferences of Prefer', async t => {
  t.equal(wantsAsync(await call({})), false, 'neither')
  t.equal(wantsAsync(await call({ route: { async: true } })), true, '?async=true')
  const cases: Array<[string, boolean]> = [
    ['respond-async', true],
    ['RESPOND-ASYNC', true],
    ['respond-async, wait=10', true],
    ['wait=10,respond-async', true],
    ['wait=10 ,  respond-async  ', true],
    ['respond-async; foo=bar', true],
    ['handling=lenient, respond-async;x', true],
    ['wait=10', false],
    ['respond-asynchronously', false],
    ['x-respond-async', false],
    ['respond', false],
    ['', false]
  ]
  for (const [prefer, wanted] of cases) t.equal(wantsAsync(await call({ headers: { prefer } })), wanted, JSON.stringify(prefer))
  const listed = await call({ headers: { prefer: 'wait=10' } })
  listed.req.headers.prefer = ['wait=10', 'respond-async'] // Prefer sent twice, as a list
  t.equal(wantsAsync(listed), true, 'a list of Prefer headers')
})

t.test('the request is queued as it would have been forwarded (path, headers, body, webhook, urgency, caller); 202 with the run\'s id and Location', async t => {
  const store = await memoryStore(t)
  const submitRun = createRunSubmit({ store, basePath: '/base', headerRules: { dropAuthorization: true, dropAcceptEncoding: true, upgrade: false } })
  const c = await asyncCall('submitted-1', {
    path: '/v4/proj/app/work/deep?x=1&y=2',
    headers: { prefer: 'respond-async', authorization: 'Bearer token', 'accept-encoding': 'gzip', 'X-Custom': 'v', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
    body: '{"job":1}'
  })
  c.urgency = 2
  c.fairCaller = 'caller-a'
  c.webhook = { url: new URL('https://hook.example/done'), secret: 's3cret' }
  t.equal(await submitRun(c), true, 'the stage answered the call')
  const got = await c.got
  t.equal(got?.status, 202)
  t.equal(got?.body, queuedBody('submitted-1'))
  t.equal(got?.headers['content-type'], JSON_TYPE)
  t.equal(got?.headers['content-length'], String(queuedBody('submitted-1').length))
  t.equal(got?.headers['x-request-id'], 'submitted-1')
  t.equal(got?.headers.location, '/v4/proj/app/_runs/submitted-1')
  t.equal(got?.headers['preference-applied'], undefined)
  t.equal(got?.headers['idempotent-replayed'], undefined)

  const view = await store.records.get(SCOPE, 'submitted-1')
  t.equal(view.record.status, 'queued')
  t.equal(view.async, true)
  t.same(view.record.webhook, { status: 'pending', attempts: 0 })
  t.same(await store.queue.queuedByUrgency(), [0, 0, 1, 0, 0, 0, 0, 0], 'queued at its urgency')

  const taken = await take(store)
  t.equal(taken.runId, 'submitted-1')
  t.same(taken.scope, SCOPE)
  t.equal(taken.urgency, 2)
  t.equal(taken.caller, 'caller-a')
  t.equal(taken.webhook?.url.href, 'https://hook.example/done')
  t.equal(taken.webhook?.secret, 's3cret')
  t.equal(taken.request.method, 'POST')
  t.equal(taken.request.path, '/base/work/deep?x=1&y=2', 'APP_URL\'s base path, the app path and the forwarded query')
  t.equal(taken.request.body?.toString(), '{"job":1}')
  t.same(taken.request.headers, [
    // the caller's own, in their order (Prefer emptied of respond-async is dropped; Authorization and Accept-Encoding by the rules)
    'X-Custom', 'v',
    'traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    'x-fake-call', c.req.headers['x-fake-call'] as string,
    'content-length', '9',
    // then the sidecar's
    'x-forwarded-for', '127.0.0.1',
    'x-forwarded-proto', 'http',
    'x-request-id', 'submitted-1',
    'x-forwarded-host', c.req.headers.host as string
  ])
})

t.test('respond-async is taken out of the stored Prefer header; the other preferences stay, and the header goes when none is left', async t => {
  const store = await memoryStore(t)
  const submitRun = createRunSubmit({ store, basePath: '', headerRules: FORWARD_ALL })
  const cases: Array<[string, string | undefined]> = [
    ['respond-async', undefined],
    ['Respond-Async', undefined],
    ['respond-async; foo=bar', undefined],
    ['respond-async, wait=5', 'wait=5'],
    ['wait=5,respond-async,handling=strict', 'wait=5, handling=strict'],
    ['handling=lenient ,  respond-async ;x=1 , return=minimal', 'handling=lenient, return=minimal'],
    ['respond-asynchronously', 'respond-asynchronously'],
    ['wait=5', 'wait=5']
  ]
  let n = 0
  for (const [prefer, stored] of cases) {
    const c = await asyncCall(`prefer-${++n}`, { headers: { prefer } })
    t.equal(await submitRun(c), true)
    const taken = await take(store)
    t.equal(taken.runId, `prefer-${n}`)
    t.equal(headerIn(taken.request.headers, 'prefer'), stored, JSON.stringify(prefer))
    t.equal(taken.request.headers.filter(name => name.toLowerCase() === 'prefer').length, stored === undefined ? 0 : 1)
    await c.got
  }
})

t.test('a GET without a body is kept without one; a call with a trace keeps its own span\'s context, not the caller\'s', async t => {
  const store = await memoryStore(t)
  const submitRun = createRunSubmit({ store, basePath: '', headerRules: FORWARD_ALL })
  const get = await asyncCall('get-1', { method: 'GET', path: '/v4/proj/app/items', route: { async: true } })
  get.body = null
  t.equal(await submitRun(get), true)
  const taken = await take(store)
  t.equal(taken.request.method, 'GET')
  t.equal(taken.request.path, '/items')
  t.equal(taken.request.body, null)
  t.equal(taken.urgency, 3, 'the default urgency')
  t.equal(taken.caller, '')

  const context: TraceContext = { traceparent: '00-11111111111111111111111111111111-2222222222222222-01', tracestate: 'sidecar=1' }
  const trace: CallTrace = { context, queued: () => {}, appRequest: () => ({ context, end: () => {} }), end: () => {} }
  const traced = await asyncCall('traced-1', { headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', tracestate: 'caller=1' } })
  traced.trace = trace
  t.equal(await submitRun(traced), true)
  const headers = (await take(store)).request.headers
  t.equal(headerIn(headers, 'traceparent'), context.traceparent)
  t.equal(headerIn(headers, 'tracestate'), 'sidecar=1')
  t.equal(headers.filter(name => name === 'traceparent').length, 1, 'the caller\'s is replaced')
})

t.test('waitRanOut: a sync call whose Prefer: wait ran out is answered 202 queued, with Preference-Applied', async t => {
  const store = await memoryStore(t)
  const submitRun = createRunSubmit({ store, basePath: '', headerRules: FORWARD_ALL })
  const c = await asyncCall('waited-1', { headers: { prefer: 'wait=7' } })
  c.async = false
  t.equal(await submitRun(c, 7), true)
  const got = await c.got
  t.equal(got?.status, 202)
  t.equal(got?.body, '{"run_id":"waited-1","status":"queued"}')
  t.equal(got?.headers['preference-applied'], 'wait=7')
  t.equal(got?.headers.location, '/v4/proj/app/_runs/waited-1')
  t.equal(got?.headers['x-request-id'], 'waited-1')
  t.equal(headerIn((await take(store)).request.headers, 'prefer'), 'wait=7', 'the app sees the preference the caller sent')
})

t.test('a full queue: the stage rejects with 503 (ASYNC_QUEUE_DEPTH, ASYNC_QUEUE_MAX_BYTES) and answers nothing itself', async t => {
  for (const [bound, settings, body] of [['ASYNC_QUEUE_DEPTH', { queueDepth: 1 }, 'x'], ['ASYNC_QUEUE_MAX_BYTES', { queueMaxBytes: 16 }, '0123456789']] as const) {
    const store = await memoryStore(t, settings)
    const submitRun = createRunSubmit({ store, basePath: '', headerRules: FORWARD_ALL })
    const first = await asyncCall(`${bound}-1`, { body })
    t.equal(await submitRun(first), true, bound)
    const refused = await asyncCall(`${bound}-2`, { body })
    const error = await submitRun(refused).then(() => undefined, (refusal: unknown) => refusal)
    t.type(error, AsyncQueueFullError, bound)
    t.match(error, { status: 503, reason: `too many async runs waiting (${bound})` })
    t.notOk(refused.res.headersSent, `${bound}: the pipeline answers the refusal`)
    t.equal(await store.queue.queuedCount(), 1, `${bound}: one run waits`)
    refused.answer(error)
    const got = await refused.got
    t.equal(got?.status, 503)
    t.equal(got?.headers['retry-after'], '1')
    t.equal(got?.body, '{"message":"too many async runs waiting"}')
  }
})

t.test('a store that cannot be reached: the stage rejects with 503', async t => {
  const store = storeWith(await memoryStore(t), { queue: { submit: unavailable } })
  const submitRun = createRunSubmit({ store, basePath: '', headerRules: FORWARD_ALL })
  const c = await asyncCall('down-1', { body: 'x' })
  await t.rejects(submitRun(c), RunStoreUnavailableError)
  t.notOk(c.res.headersSent)
})

t.test('with an Idempotency-Key, the 202 is kept for repeats; a refused run frees the key', async t => {
  const store = await memoryStore(t, { queueDepth: 1 })
  const submitRun = createRunSubmit({ store, basePath: '', headerRules: FORWARD_ALL })
  const claimKey = createIdempotency({ store, maxAnswerBytes: 1024, logger: watchedLogger().logger, runsTotal: countingCounter<RunStatus>(), reportInternal: watchedReports().reportInternal })
  const keyed = async (key: string, runId: string): Promise<FakeCall> => {
    const c = await asyncCall(runId, { headers: { 'idempotency-key': key }, body: 'job' })
    c.idempotencyKey = idempotencyKeyOf(c)
    return c
  }
  const first = await keyed('k-1', 'keyed-1')
  t.equal(await claimKey(first), false)
  t.equal(await submitRun(first), true)
  t.equal((await first.got)?.body, queuedBody('keyed-1'))
  const repeat = await keyed('k-1', 'keyed-2')
  t.equal(await claimKey(repeat), true, 'the repeat is answered by the key stage')
  const replayed = await repeat.got
  t.equal(replayed?.status, 202)
  t.equal(replayed?.body, queuedBody('keyed-1'))
  t.equal(replayed?.headers['idempotent-replayed'], 'true')
  t.equal(replayed?.headers.location, '/v4/proj/app/_runs/keyed-1')

  const refused = await keyed('k-2', 'keyed-3')
  t.equal(await claimKey(refused), false)
  await t.rejects(submitRun(refused), AsyncQueueFullError, 'the queue holds one run')
  const retry = await keyed('k-2', 'keyed-4')
  t.equal(await claimKey(retry), false, 'the key was freed: the retry holds it')
})

t.test('a caller that left before its 202: the run is queued all the same, and nothing is written', async t => {
  const store = await memoryStore(t)
  const submitRun = createRunSubmit({ store, basePath: '', headerRules: FORWARD_ALL })
  const c = await asyncCall('gone-1', { body: 'job' })
  c.body = Buffer.from('job') // read before the caller left
  const gone = once(c.res, 'close')
  c.leave()
  await gone
  t.equal(await submitRun(c), true)
  t.notOk(c.res.headersSent)
  t.equal(await c.got, undefined)
  const taken = await take(store)
  t.equal(taken.runId, 'gone-1')
  t.equal(taken.request.body?.toString(), 'job')
})
