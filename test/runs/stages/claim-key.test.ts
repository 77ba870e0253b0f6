import { once } from 'node:events'
import t, { type Test } from 'tap'
import { AsyncQueueFullError, IdempotencyInProgressError, IdempotencyKeyReusedError, MalformedRequestError, QueueFullError, RunIdTakenError, RunNotFoundError, RunStoreUnavailableError } from '../../../src/errors.ts'
import { idempotencySlot } from '../../../src/runs/idempotency-key.ts'
import { recordedRun } from '../../../src/runs/run-record.ts'
import type { KeptAnswer, KeyAnswer, NewRun, RunOutcome, RunStatus, TakenRun } from '../../../src/runs/run-data.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import { createIdempotency, idempotencyKeyOf, keepAsyncAnswer } from '../../../src/runs/stages/claim-key.ts'
import { queuedBody } from '../../../src/runs/stages/queued-answer.ts'
import { countingCounter, type FakeCall, type FakeCallOptions, fakeCalls } from '../../helpers/fake-call.ts'
import { memoryStore, SCOPE, type StoreParts, storeWith, unavailable, watchedLogger, watchedReports } from './stage-kit.ts'

const call = await fakeCalls(t)

const JSON_TYPE = 'application/json; charset=utf-8'
const TOO_LARGE = '{"message":"the answer to this Idempotency-Key was too large to keep"}'

interface Setup {
  readonly store: RunStore
  readonly claimKey: (call: FakeCall) => Promise<boolean>
  readonly runsTotal: ReturnType<typeof countingCounter<RunStatus>>
  readonly log: ReturnType<typeof watchedLogger>
}

/** The key stage over the real memory store (`parts`: some of its methods replaced). */
async function setup (t: Test, options: { parts?: StoreParts, maxAnswerBytes?: number } = {}): Promise<Setup> {
  const memory = await memoryStore(t)
  return stageOver(options.parts === undefined ? memory : storeWith(memory, options.parts), options.maxAnswerBytes)
}

/** The key stage over a store already made. */
function stageOver (store: RunStore, maxAnswerBytes = 1024): Setup {
  const runsTotal = countingCounter<RunStatus>()
  const log = watchedLogger()
  const claimKey = createIdempotency({ store, maxAnswerBytes, logger: log.logger, runsTotal, reportInternal: watchedReports().reportInternal })
  return { store, claimKey, runsTotal, log }
}

/** A POST with `key` and run id `runId`, as the request checks leave it: its key read, its body the request's stream. */
async function keyed (key: string, runId: string, options: FakeCallOptions = {}): Promise<FakeCall> {
  const c = await call({ ...options, headers: { ...options.headers, 'idempotency-key': key, 'x-request-id': runId } })
  c.idempotencyKey = idempotencyKeyOf(c)
  c.body = c.req
  return c
}

const newRun = (runId: string): NewRun => ({ scope: SCOPE, runId, request: { method: 'POST', path: '/work', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })

t.test('idempotencyKeyOf: a POST\'s key as sent; 400 when not 1 to 255 visible ASCII characters, or sent twice; other methods are not asked', async t => {
  t.equal(idempotencyKeyOf(await call({})), undefined, 'a POST without one')
  t.equal(idempotencyKeyOf(await call({ headers: { 'idempotency-key': 'Key-1_~!{}' } })), 'Key-1_~!{}')
  t.equal(idempotencyKeyOf(await call({ headers: { 'idempotency-key': 'k'.repeat(255) } })), 'k'.repeat(255), '255 characters')
  for (const bad of ['k'.repeat(256), '', 'a b', 'caf\u00e9', 'tab\there', 'k1, k2']) {
    const c = await call({ headers: { 'idempotency-key': bad } })
    t.throws(() => idempotencyKeyOf(c), MalformedRequestError, JSON.stringify(bad))
  }
  const twice = await call({ headers: { 'idempotency-key': 'k1' } })
  twice.req.headers['idempotency-key'] = ['k1', 'k2'] // the header as a list (a raw parser's)
  t.throws(() => idempotencyKeyOf(twice), MalformedRequestError, 'a list of keys')
  for (const method of ['GET', 'PUT', 'DELETE', 'PATCH']) {
    t.equal(idempotencyKeyOf(await call({ method, headers: { 'idempotency-key': 'a b' } })), undefined, `${method}: not asked, not checked`)
  }
  const refused = await call({ headers: { 'idempotency-key': 'a b' } })
  try {
    idempotencyKeyOf(refused)
  } catch (error) {
    refused.answer(error)
  }
  const got = await refused.got
  t.equal(got?.status, 400)
  t.equal(got?.body, '{"message":"malformed Idempotency-Key: 1 to 255 visible ASCII characters, sent once"}')
})

t.test('the first sync call claims its key for its caller: recorded running at once, its body read whole', async t => {
  const { store, claimKey } = await setup(t)
  const c = await keyed('k-first', 'first-1', { path: '/v4/proj/app/work?x=1', body: '{"n":1}' })
  c.caller = 'sub-1'
  c.webhook = { url: new URL('https://hook.example/done'), secret: 's3cret' }
  t.equal(await claimKey(c), false, 'the call goes on')
  t.equal(c.keySlot, idempotencySlot(SCOPE, '/work', 'sub-1', 'k-first'), 'the slot of its project, app, path, caller and key')
  t.ok(Buffer.isBuffer(c.body), 'the body stream was read whole')
  t.equal((c.body as Buffer).toString(), '{"n":1}')
  t.type(c.recording, 'function', 'its answer is recorded on the run')
  const view = await store.records.get(SCOPE, 'first-1')
  t.equal(view.async, false)
  t.equal(view.record.status, 'running')
  t.equal(view.record.started_at, view.record.created_at, 'running from its claim')
  t.equal(view.record.queue_time_ms, 0)
  t.same(view.record.webhook, { status: 'pending', attempts: 0 })
  t.notOk(c.res.headersSent, 'nothing answered')
})

t.test('the first async call claims its key and is not recorded (its submission records it)', async t => {
  const { store, claimKey } = await setup(t)
  const c = await keyed('k-async-first', 'async-first')
  c.async = true
  t.equal(await claimKey(c), false)
  t.equal(c.keySlot, idempotencySlot(SCOPE, '/work', '', 'k-async-first'))
  t.equal(c.recording, undefined)
  t.equal(c.body, null, 'no body')
  await t.rejects(store.records.get(SCOPE, 'async-first'), RunNotFoundError)
})

t.test('a forwarded call\'s answer is kept before the caller has its end; a repeat gets it again, replayed, with the first\'s X-Request-Id', async t => {
  let keeping: ((kept: KeptAnswer) => void) | undefined
  let release: (() => void) | undefined
  const keptCalled = new Promise<KeptAnswer>(resolve => { keeping = resolve })
  const held = new Promise<void>(resolve => { release = resolve })
  const memory = await memoryStore(t)
  const { claimKey } = stageOver(storeWith(memory, {
    keys: {
      keepAnswer: async (scope, slot, runId, answer) => {
        keeping?.(answer)
        await held
        await memory.keys.keepAnswer(scope, slot, runId, answer)
      }
    }
  }))
  const first = await keyed('k-replay', 'replay-1', { body: 'same' })
  t.equal(await claimKey(first), false)
  first.forwarded = true
  first.out.writeHead(201, { 'Content-Type': 'text/plain; charset=utf-8', 'x-app': 'yes' })
  first.out.write('hel')
  first.out.end(Buffer.from('lo'))
  const answer = await keptCalled
  t.same({ status: answer.status, contentType: answer.contentType, body: answer.body.toString() }, { status: 201, contentType: 'text/plain; charset=utf-8', body: 'hello' }, 'the answer as the caller gets it')
  t.notOk(first.res.writableEnded, 'the end waits for the answer to be kept')
  release?.()
  const got = await first.got
  t.equal(got?.status, 201)
  t.equal(got?.body, 'hello')

  const repeat = await keyed('k-replay', 'replay-2', { body: 'same' })
  t.equal(await claimKey(repeat), true, 'answered')
  const replayed = await repeat.got
  t.equal(replayed?.status, 201)
  t.equal(replayed?.body, 'hello')
  t.equal(replayed?.headers['content-type'], 'text/plain; charset=utf-8')
  t.equal(replayed?.headers['content-length'], '5')
  t.equal(replayed?.headers['x-request-id'], 'replay-1', 'the first\'s run id')
  t.equal(replayed?.headers['idempotent-replayed'], 'true')
  t.equal(replayed?.headers.location, undefined, 'a sync answer has no Location')
  t.equal(replayed?.headers['x-app'], undefined, 'only the status, type and body are kept')
  t.equal(repeat.keySlot, undefined, 'the repeat holds nothing')
})

t.test('while the first runs: a sync repeat is 409, an async one 202 with the first\'s run id; another body or query is 422', async t => {
  const { claimKey } = await setup(t)
  const first = await keyed('k-busy', 'busy-1', { path: '/v4/proj/app/work?x=1', body: 'a' })
  t.equal(await claimKey(first), false)

  const sync = await keyed('k-busy', 'busy-2', { path: '/v4/proj/app/work?x=1', body: 'a' })
  const error = await claimKey(sync).then(() => undefined, (refusal: unknown) => refusal)
  t.type(error, IdempotencyInProgressError)
  sync.answer(error) // as the pipeline answers what a stage throws
  const refused = await sync.got
  t.equal(refused?.status, 409)
  t.equal(refused?.body, '{"message":"a request with this Idempotency-Key is in progress"}')

  const async = await keyed('k-busy', 'busy-3', { path: '/v4/proj/app/work?x=1', body: 'a' })
  async.async = true
  t.equal(await claimKey(async), true)
  const queued = await async.got
  t.equal(queued?.status, 202)
  t.equal(queued?.body, queuedBody('busy-1'))
  t.equal(queued?.headers['x-request-id'], 'busy-1')
  t.equal(queued?.headers['idempotent-replayed'], 'true')
  t.equal(queued?.headers.location, '/v4/proj/app/_runs/busy-1')

  const sameButToken = await keyed('k-busy', 'busy-4', { path: '/v4/proj/app/work?x=1&access_token=abc', body: 'a' })
  await t.rejects(claimKey(sameButToken), IdempotencyInProgressError, 'access_token is not part of the request compared')

  for (const [what, path, body] of [['another body', '/v4/proj/app/work?x=1', 'b'], ['no body', '/v4/proj/app/work?x=1', undefined], ['another query', '/v4/proj/app/work?x=2', 'a'], ['no query', '/v4/proj/app/work', 'a']] as const) {
    const other = await keyed('k-busy', 'busy-other', { path, body })
    await t.rejects(claimKey(other), IdempotencyKeyReusedError, what)
    const asyncOther = await keyed('k-busy', 'busy-other', { path, body })
    asyncOther.async = true
    await t.rejects(claimKey(asyncOther), IdempotencyKeyReusedError, `${what}, async`)
  }

  const otherPath = await keyed('k-busy', 'busy-path', { path: '/v4/proj/app/other?x=1', body: 'a' })
  t.equal(await claimKey(otherPath), false, 'another path is another key')
  const otherApp = await keyed('k-busy', 'busy-app', { path: '/v4/proj/app2/work?x=1', body: 'a' })
  t.equal(await claimKey(otherApp), false, 'another app is another key')
  const otherCaller = await keyed('k-busy', 'busy-caller', { path: '/v4/proj/app/work?x=1', body: 'a' })
  otherCaller.caller = 'someone-else'
  t.equal(await claimKey(otherCaller), false, 'another caller is another key')
})

t.test('keepAsyncAnswer: the 202 is kept for repeats (with Location); a refused submission frees the key and rejects with its error', async t => {
  const { store, claimKey } = await setup(t)
  const first = await keyed('k-submit', 'submit-1', { body: 'job' })
  first.async = true
  t.equal(await claimKey(first), false)
  await keepAsyncAnswer(store, first, store.queue.submit(newRun('submit-1')))
  for (const [runId, async] of [['submit-2', true], ['submit-3', false]] as const) {
    const repeat = await keyed('k-submit', runId, { body: 'job' })
    repeat.async = async
    t.equal(await claimKey(repeat), true)
    const got = await repeat.got
    t.equal(got?.status, 202)
    t.equal(got?.body, queuedBody('submit-1'))
    t.equal(got?.headers['content-type'], JSON_TYPE)
    t.equal(got?.headers['x-request-id'], 'submit-1')
    t.equal(got?.headers['idempotent-replayed'], 'true')
    t.equal(got?.headers.location, '/v4/proj/app/_runs/submit-1', async ? 'an async repeat' : 'a sync repeat of an async first')
  }

  const refused = await keyed('k-refused', 'refused-1', { body: 'job' })
  refused.async = true
  t.equal(await claimKey(refused), false)
  await t.rejects(keepAsyncAnswer(store, refused, Promise.reject(new AsyncQueueFullError())), AsyncQueueFullError)
  const retry = await keyed('k-refused', 'refused-2', { body: 'job' })
  retry.async = true
  t.equal(await claimKey(retry), false, 'the key was freed: the retry holds it')
})

t.test('keepAsyncAnswer: a free that fails too still rejects with the submission\'s error; a keep that fails rejects with its own', async t => {
  const memory = await memoryStore(t)
  const store = storeWith(memory, { keys: { drop: unavailable, keepAnswer: unavailable } })
  const { claimKey } = stageOver(store)
  const c = await keyed('k-down', 'down-1')
  c.async = true
  t.equal(await claimKey(c), false)
  await t.rejects(keepAsyncAnswer(store, c, Promise.reject(new AsyncQueueFullError())), AsyncQueueFullError)
  const next = await keyed('k-down-2', 'down-2')
  next.async = true
  t.equal(await claimKey(next), false)
  await t.rejects(keepAsyncAnswer(store, next, memory.queue.submit(newRun('down-2'))), RunStoreUnavailableError)
})

t.test('an answer larger than maxAnswerBytes: the caller gets it whole, its repeats get 409 "too large to keep"', async t => {
  const { claimKey } = await setup(t, { maxAnswerBytes: 8 })
  const exact = await keyed('k-eight', 'eight-1')
  t.equal(await claimKey(exact), false)
  exact.forwarded = true
  exact.out.writeHead(200, { 'content-type': 'text/plain' })
  exact.out.end('12345678')
  t.equal((await exact.got)?.body, '12345678')
  const exactRepeat = await keyed('k-eight', 'eight-2')
  t.equal(await claimKey(exactRepeat), true)
  t.equal((await exactRepeat.got)?.body, '12345678', 'maxAnswerBytes is kept')

  const large = await keyed('k-nine', 'nine-1')
  t.equal(await claimKey(large), false)
  large.forwarded = true
  large.out.writeHead(200, { 'content-type': 'text/plain' })
  large.out.write('12345')
  large.out.write('6789')
  large.out.end('0')
  t.equal((await large.got)?.body, '1234567890', 'the caller gets all of it')
  const repeat = await keyed('k-nine', 'nine-2')
  t.equal(await claimKey(repeat), true)
  const got = await repeat.got
  t.equal(got?.status, 409)
  t.equal(got?.body, TOO_LARGE)
  t.equal(got?.headers['content-type'], JSON_TYPE)
  t.equal(got?.headers['x-request-id'], 'nine-1')
  t.equal(got?.headers['idempotent-replayed'], 'true')
})

t.test('the kept answer is what the caller got: its Content-Type whatever its case, its bytes however they were written; an SSE replay is not cached', async t => {
  const { claimKey } = await setup(t)
  const cases: Array<{ name: string, answer: (c: FakeCall) => void, type: string | undefined, body: string }> = [
    {
      name: 'an event stream',
      answer: c => { c.out.writeHead(200, { 'content-type': 'text/event-stream' }).end('data: 1\n\n') },
      type: 'text/event-stream',
      body: 'data: 1\n\n'
    },
    {
      name: 'the header name in capitals, another status',
      answer: c => { c.out.writeHead(203, { 'CONTENT-TYPE': 'text/html' }).end('<p>') },
      type: 'text/html',
      body: '<p>'
    },
    {
      name: 'none',
      answer: c => { c.out.writeHead(200, { 'x-other': 'v' }).end('bare') },
      type: undefined,
      body: 'bare'
    },
    {
      name: 'strings and bytes, an end with nothing more',
      answer: c => {
        c.out.writeHead(200, { 'content-type': 'text/plain' })
        c.out.write('hi')
        c.out.write(Buffer.from([0x2c, 0x20]))
        c.out.write('thére')
        c.out.end()
      },
      type: 'text/plain',
      body: 'hi, thére'
    }
  ]
  let n = 0
  for (const { name, answer, type, body } of cases) {
    const key = `k-framed-${++n}`
    const first = await keyed(key, `framed-${n}`)
    t.equal(await claimKey(first), false)
    first.forwarded = true
    answer(first)
    t.equal((await first.got)?.body, body, `${name}: the caller's`)
    const repeat = await keyed(key, `framed-${n}-again`)
    t.equal(await claimKey(repeat), true)
    const got = await repeat.got
    t.equal(got?.body, body, `${name}: replayed`)
    t.equal(got?.headers['content-type'], type, `${name}: its Content-Type`)
    const sse = type === 'text/event-stream'
    t.equal(got?.headers['cache-control'], sse ? 'no-cache' : undefined, `${name}: Cache-Control`)
    t.equal(got?.headers['x-accel-buffering'], sse ? 'no' : undefined, `${name}: X-Accel-Buffering`)
    t.equal(got?.status, n === 2 ? 203 : 200, `${name}: its status`)
  }
  t.equal(n, 4)
})

t.test('a call that never reached the app (a 503 from the gate) frees its key and forgets its run: a retry runs', async t => {
  const { store, claimKey } = await setup(t)
  const first = await keyed('k-gate', 'gate-1')
  t.equal(await claimKey(first), false)
  first.answer(new QueueFullError(1))
  const got = await first.got
  t.equal(got?.status, 503)
  t.equal(got?.body, '{"message":"too many requests waiting for the app"}')
  first.close()
  await t.rejects(store.records.get(SCOPE, 'gate-1'), RunNotFoundError, 'it never ran')
  const retry = await keyed('k-gate', 'gate-2')
  t.equal(await claimKey(retry), false, 'the retry holds the key')
  t.equal((await store.records.get(SCOPE, 'gate-2')).record.status, 'running')
})

t.test('a forwarded call whose answer did not end (the app failed, its caller was cut) frees its key; its run stays', async t => {
  const memory = await memoryStore(t)
  let keepAnswers = 0
  const { store, claimKey } = stageOver(storeWith(memory, { keys: { keepAnswer: async (...args) => { keepAnswers++; await memory.keys.keepAnswer(...args) } } }))
  const first = await keyed('k-cut', 'cut-1')
  t.equal(await claimKey(first), false)
  first.forwarded = true
  first.out.writeHead(200, { 'content-type': 'text/plain' })
  first.out.write('part')
  const closed = once(first.res, 'close')
  first.res.destroy() // what the relay does when the app fails mid-answer
  await closed // the call closed with it
  t.equal(await first.got, undefined, 'the caller was cut')
  first.out.end('late') // nothing is kept of a response already cut
  await new Promise(resolve => setImmediate(resolve)) // past the microtask a keep would start in
  t.equal(keepAnswers, 0, 'nothing kept')
  const retry = await keyed('k-cut', 'cut-2')
  t.equal(await claimKey(retry), false, 'the retry runs')
  t.equal((await store.records.get(SCOPE, 'cut-1')).record.status, 'running', 'the first run reached the app: its record is not forgotten')
})

t.test('a plain caller that left: the end of its answer is not kept, and its key is freed', async t => {
  const memory = await memoryStore(t)
  let keepAnswers = 0
  const { claimKey } = stageOver(storeWith(memory, { keys: { keepAnswer: async (...args) => { keepAnswers++; await memory.keys.keepAnswer(...args) } } }))
  const first = await keyed('k-left', 'left-1')
  t.equal(await claimKey(first), false)
  first.forwarded = true
  first.out.writeHead(200, { 'content-type': 'text/plain' })
  const closed = once(first.res, 'close')
  first.leave()
  await closed
  t.equal(await first.got, undefined)
  first.out.end('never seen')
  await new Promise(resolve => setImmediate(resolve)) // past the microtask a keep would start in
  t.equal(keepAnswers, 0, 'nothing kept')
  const retry = await keyed('k-left', 'left-2')
  t.equal(await claimKey(retry), false, 'the retry runs')
})

t.test('a call that outlives its caller: its answer is copied and kept, and no byte of it goes to the socket', async t => {
  const { claimKey } = await setup(t)
  const first = await keyed('k-outlive', 'outlive-1')
  t.equal(await claimKey(first), false)
  first.forwarded = true
  // what the relay does when the caller of a recorded run leaves: it goes on, its writer muted
  first.onAbort({ abortFor: () => {}, outlivesCaller: () => { first.out.mute(); return true } })
  first.out.writeHead(200, { 'content-type': 'text/plain' })
  t.equal(first.out.write('head '), true)
  const closed = once(first.res, 'close')
  first.req.socket.destroy()
  await closed
  t.ok(first.outliving, 'the call goes on without its caller')
  t.equal(first.out.write('kept '), true, 'never paused: there is no reader')
  first.out.end('whole')
  t.equal(await first.got, undefined, 'the caller had left')
  const repeat = await keyed('k-outlive', 'outlive-2')
  t.equal(await claimKey(repeat), true)
  t.equal((await repeat.got)?.body, 'head kept whole', 'the repeat gets all of it')
})

t.test('with its recording tee, the answer is kept with the run\'s end, in one step; the run is counted once', async t => {
  const memory = await memoryStore(t)
  const finishes: Array<KeyAnswer | undefined> = []
  let keepAnswers = 0
  const { store, claimKey, runsTotal } = stageOver(storeWith(memory, {
    records: {
      finish: async (run: TakenRun, outcome: RunOutcome, keep?: KeyAnswer) => {
        finishes.push(keep)
        return await memory.records.finish(run, outcome, keep)
      }
    },
    keys: {
      keepAnswer: async (...args) => {
        keepAnswers++
        await memory.keys.keepAnswer(...args)
      }
    }
  }))
  const c = await keyed('k-tee', 'tee-1', { body: '{"q":1}' })
  t.equal(await claimKey(c), false)
  const tee = c.recording?.(undefined)
  if (tee === undefined) throw new Error('no recording')
  c.forwarded = true
  tee.forwarded()
  // what the relay and its passthrough sink do: write to the caller and the capture, then end both
  tee.capture.status = 200
  c.out.writeHead(200, { 'content-type': 'application/json' })
  tee.capture.body(Buffer.from('{"ok":true}'))
  c.out.end('{"ok":true}')
  tee.finish()
  const got = await c.got
  t.equal(got?.body, '{"ok":true}')
  t.equal(runsTotal.counts.get('succeeded'), 1, 'counted before the caller had its end')
  t.equal(finishes.length, 1)
  t.equal(finishes[0]?.slot, c.keySlot, 'the answer went with the run\'s end')
  t.equal(finishes[0]?.answer.body.toString(), '{"ok":true}')
  t.equal(finishes[0]?.answer.contentType, 'application/json')
  t.equal(keepAnswers, 0, 'not kept a second time')
  const view = await store.records.get(SCOPE, 'tee-1')
  t.equal(view.record.status, 'succeeded')
  t.equal(view.record.status_code, 200)
  t.equal(view.resultJson, '{"ok":true}')
  tee.finish()
  t.equal(runsTotal.counts.get('succeeded'), 1, 'a second finish counts nothing')
  const repeat = await keyed('k-tee', 'tee-2', { body: '{"q":1}' })
  t.equal(await claimKey(repeat), true)
  t.equal((await repeat.got)?.body, '{"ok":true}')
  t.equal(runsTotal.counts.get('succeeded'), 1, 'a replay is no new run')
})

t.test('a store that cannot be reached: the claim rejects with 503, and the call holds nothing', async t => {
  const memory = await memoryStore(t)
  const { claimKey } = stageOver(storeWith(memory, { keys: { claim: unavailable } }))
  const c = await keyed('k-unreachable', 'unreachable-1')
  await t.rejects(claimKey(c), RunStoreUnavailableError)
  t.equal(c.keySlot, undefined)
  t.equal(c.recording, undefined)
  c.answer(new RunStoreUnavailableError('down'))
  const got = await c.got
  t.equal(got?.status, 503)
  t.equal(got?.headers['retry-after'], '1')
})

t.test('a run id already recorded: the claim rejects with 409 and the key is not claimed', async t => {
  const { store, claimKey } = await setup(t)
  await store.records.open(recordedRun(newRun('taken')))
  const c = await keyed('k-taken', 'taken')
  await t.rejects(claimKey(c), RunIdTakenError)
  t.equal(c.keySlot, undefined)
  const retry = await keyed('k-taken', 'not-taken')
  t.equal(await claimKey(retry), false, 'the key is free')
})

t.test('an answer that cannot be kept is logged, and the caller still gets its end; a key that cannot be freed is logged', async t => {
  const memory = await memoryStore(t)
  const { claimKey, log } = stageOver(storeWith(memory, { keys: { keepAnswer: unavailable, drop: unavailable } }))
  const kept = await keyed('k-not-kept', 'not-kept')
  t.equal(await claimKey(kept), false)
  kept.forwarded = true
  const warned = log.next()
  kept.out.writeHead(200, { 'content-type': 'text/plain' })
  kept.out.end('still sent')
  t.match(await warned, { level: 40, msg: 'Idempotency-Key answer not kept', runId: 'not-kept', err: { message: 'run store unavailable' } })
  t.equal((await kept.got)?.body, 'still sent')

  const freed = await keyed('k-not-freed', 'not-freed')
  t.equal(await claimKey(freed), false)
  const dropWarned = log.next()
  freed.close()
  t.match(await dropWarned, { level: 40, msg: 'Idempotency-Key not freed', runId: 'not-freed' })
  t.equal(log.lines.length, 2)
})

t.test('a repeat whose caller already left is answered nothing', async t => {
  const { claimKey } = await setup(t)
  const first = await keyed('k-gone', 'gone-1')
  t.equal(await claimKey(first), false)
  const asyncRepeat = await keyed('k-gone', 'gone-2')
  asyncRepeat.async = true
  asyncRepeat.body = null // no body to read from a socket that is gone
  const asyncGone = once(asyncRepeat.res, 'close')
  asyncRepeat.leave()
  await asyncGone // the call sees its caller gone once its response closes
  t.equal(await claimKey(asyncRepeat), true)
  t.equal(await asyncRepeat.got, undefined)
  t.notOk(asyncRepeat.res.headersSent, 'no 202 written')

  first.forwarded = true
  first.out.end('done')
  await first.got
  const replayRepeat = await keyed('k-gone', 'gone-3')
  replayRepeat.body = null
  const replayGone = once(replayRepeat.res, 'close')
  replayRepeat.leave()
  await replayGone
  t.equal(await claimKey(replayRepeat), true)
  t.notOk(replayRepeat.res.headersSent, 'no replay written')
})
