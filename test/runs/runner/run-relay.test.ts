import t from 'tap'
import type { Pool } from 'undici'
import { DeadlineExceededError, ReplicaStoppedError, RunCanceledError, SIDECAR_INTERNAL } from '../../../src/errors.ts'
import type { RunOutcome } from '../../../src/runs/run-data.ts'
import { RunRelay, type RunRelayOptions } from '../../../src/runs/runner/run-relay.ts'
import { answer, appPool, deadOrigin, testApp, within, type AppRequest } from './runner-kit.ts'

// RunRelay alone: an undici Pool dispatches a request to a real app on loopback with the relay as
// its handler; the test writes the app's answer and reads the outcome and the events.

interface Relayed {
  readonly relay: RunRelay
  readonly events: Array<[number, string]>
  /** How many times the app was to be told of a cut. */
  readonly cancels: () => number
  /** Resolves once `n` events arrived. */
  readonly eventCount: (n: number) => Promise<void>
  /** The outcome, bounded from now. */
  readonly outcome: () => Promise<RunOutcome>
}

interface RelayInput extends Partial<Omit<RunRelayOptions, 'onEvent' | 'cancelAtApp'>> {
  readonly path?: string
  readonly headers?: string[]
  readonly body?: string
  readonly onEvent?: (relay: RunRelay, n: number, data: string) => void
}

function relay (pool: Pool, input: RelayInput = {}): Relayed {
  const events: Array<[number, string]> = []
  let cancels = 0
  let waiters: Array<() => void> = []
  const method = input.method ?? 'GET'
  const runRelay: RunRelay = new RunRelay({
    method,
    accept: input.accept,
    maxResultBytes: input.maxResultBytes ?? 1 << 20,
    maxEventBytes: input.maxEventBytes ?? 1 << 16,
    appUrl: input.appUrl ?? 'http://app.test/',
    cancelAtApp: () => { cancels++ },
    onEvent: (n, data) => {
      events.push([n, data])
      const wake = waiters
      waiters = []
      for (const resolve of wake) resolve()
      input.onEvent?.(runRelay, n, data)
    }
  })
  pool.dispatch({ method, path: input.path ?? '/run', headers: input.headers ?? [], body: input.body ?? null }, runRelay)
  return {
    relay: runRelay,
    events,
    cancels: () => cancels,
    eventCount: async n => {
      await within((async () => { while (events.length < n) await new Promise<void>(resolve => waiters.push(resolve)) })(), `${n} events`)
    },
    outcome: async () => await within(runRelay.outcome, 'the outcome')
  }
}

/** The outcome without its timings (checked on their own). */
function settled (outcome: RunOutcome): Omit<RunOutcome, 'runTimeMs' | 'completedAt'> {
  const { runTimeMs: _runTimeMs, completedAt: _completedAt, ...rest } = outcome
  return rest
}

t.test('a JSON answer: succeeded, the app\'s status, the body as sent (trimmed), timed from the dispatch', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const before = Date.now()
  const run = relay(pool, { method: 'POST', path: '/json?x=1', headers: ['content-type', 'application/json'], body: '{"in":1}' })
  const request = await app.arrived(1)
  t.equal(request.method, 'POST')
  t.equal(request.url, '/json?x=1')
  t.equal(request.body.toString(), '{"in":1}')
  answer(request, 201, ' {"ok": true} \n')
  const outcome = await run.outcome()
  t.same(settled(outcome), { status: 'succeeded', statusCode: 201, resultJson: '{"ok": true}', error: undefined })
  t.ok(outcome.runTimeMs > 0 && outcome.runTimeMs < Date.now() - before + 1, `runTimeMs ${outcome.runTimeMs}`)
  t.ok(outcome.completedAt >= before && outcome.completedAt <= Date.now())
  t.same(run.events, [], 'no events for a plain body')
  t.equal(run.cancels(), 0)
})

t.test('plain answers: text as a JSON string, an empty 204, a HEAD, a chunked body without Accept: text/event-stream', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)

  const text = relay(pool)
  answer(await app.arrived(1), 200, 'plain "text"', { 'content-type': 'text/plain' })
  t.same(settled(await text.outcome()), { status: 'succeeded', statusCode: 200, resultJson: '"plain \\"text\\""', error: undefined })

  const empty = relay(pool)
  answer(await app.arrived(2), 204, '')
  t.same(settled(await empty.outcome()), { status: 'succeeded', statusCode: 204, resultJson: '""', error: undefined })

  const head = relay(pool, { method: 'HEAD' })
  const headRequest = await app.arrived(3)
  t.equal(headRequest.method, 'HEAD')
  headRequest.res.writeHead(200, { 'content-type': 'text/event-stream', 'content-length': '10' }).end()
  t.same(settled(await head.outcome()), { status: 'succeeded', statusCode: 200, resultJson: '""', error: undefined })
  t.same(head.events, [], 'a HEAD has no body to split')

  const chunked = relay(pool)
  const chunkedRequest = await app.arrived(4)
  chunkedRequest.res.writeHead(200, { 'content-type': 'application/json' })
  chunkedRequest.res.write('{"a":')
  chunkedRequest.res.end('1}')
  t.same(settled(await chunked.outcome()), { status: 'succeeded', statusCode: 200, resultJson: '{"a":1}', error: undefined })
  t.same(chunked.events, [])
})

t.test('a non-2xx answer fails the run with the app\'s status and its body as the result', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const missing = relay(pool)
  answer(await app.arrived(1), 404, '{"message":"no such thing"}')
  t.same(settled(await missing.outcome()), { status: 'failed', statusCode: 404, resultJson: '{"message":"no such thing"}', error: 'app answered 404' })
  const broken = relay(pool, { accept: 'text/event-stream' })
  answer(await app.arrived(2), 500, 'data: not a stream\n\n', { 'content-type': 'text/event-stream' })
  t.same(settled(await broken.outcome()), { status: 'failed', statusCode: 500, resultJson: '"data: not a stream\\n\\n"', error: 'app answered 500' }, 'a 5xx is never read as a stream')
  t.same(broken.events, [])
})

/** Writes each unit as its own read, waiting for the events it makes before the next. */
async function stream (run: Relayed, request: AppRequest, units: ReadonlyArray<readonly [string, number]>): Promise<void> {
  for (const [unit, eventsAfter] of units) {
    request.res.write(unit)
    await run.eventCount(eventsAfter)
  }
  request.res.end()
}

t.test('stream rows: SSE, NDJSON, JSON Lines and chunks (Accept: text/event-stream): each event numbered from 0 as it arrives; the result the array of values', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const modes = [
    {
      name: 'SSE', accept: undefined, headers: { 'content-type': 'text/event-stream; charset=utf-8' },
      units: [['\ufeffdata: {"a":1}\n\n', 1], ['event: x\nid: 7\ndata: two\ndata: lines\n\n: comment\n\n', 2], ['data: 3\n\n', 3]],
      events: ['{"a":1}', 'two\nlines', '3'], result: '[{"a":1},"two\\nlines",3]'
    },
    {
      name: 'NDJSON', accept: undefined, headers: { 'content-type': 'application/x-ndjson' },
      units: [['{"a":1}\n', 1], ['  \ntext\n', 2], ['3', 2]], events: ['{"a":1}', 'text', '3'], result: '[{"a":1},"text",3]'
    },
    {
      name: 'JSON Lines', accept: undefined, headers: { 'content-type': 'application/jsonl' },
      units: [['{"a":1}\n', 1], ['text\r\n', 2], ['3\n', 3]], events: ['{"a":1}', 'text', '3'], result: '[{"a":1},"text",3]'
    },
    {
      name: 'chunks', accept: 'application/json, text/event-stream', headers: { 'content-type': 'application/octet-stream' },
      units: [['{"a":1}', 1], ['te xt', 2], ['3', 3]], events: ['{"a":1}', 'te xt', '3'], result: '[{"a":1},"te xt",3]'
    }
  ] as const
  for (const [i, mode] of modes.entries()) {
    const run = relay(pool, { accept: mode.accept })
    const request = await app.arrived(i + 1)
    request.res.writeHead(201, mode.headers)
    await stream(run, request, mode.units)
    const outcome = await run.outcome()
    t.same(run.events, mode.events.map((data, n) => [n, data]), `${mode.name}: the events, in order`)
    t.same(settled(outcome), { status: 'succeeded', statusCode: 200, resultJson: mode.result, error: undefined }, `${mode.name}: 200, as a caller of the stream gets it`)
  }
})

t.test('a compressed SSE body is not split into events', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const run = relay(pool)
  answer(await app.arrived(1), 200, 'data: 1\n\n', { 'content-type': 'text/event-stream', 'content-encoding': 'identity' })
  t.same(run.events, [])
  t.equal((await run.outcome()).resultJson, '[1]', 'identity is no encoding: a stream')
  const gzipped = relay(pool)
  answer(await app.arrived(2), 200, 'data: 1\n\n', { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' })
  t.same(settled(await gzipped.outcome()), { status: 'succeeded', statusCode: 200, resultJson: '"data: 1\\n\\n"', error: undefined })
  t.same(gzipped.events, [])
})

t.test('an event over STREAM_MAX_EVENT_BYTES fails the run 502 and cuts the app request; the app is not told (its own event)', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const limit = 65_536 // the least STREAM_MAX_EVENT_BYTES: a socket read is never longer
  const message = `event larger than ${limit} bytes`
  const run = relay(pool, { maxEventBytes: limit })
  const request = await app.arrived(1)
  request.res.writeHead(200, { 'content-type': 'text/event-stream' })
  request.res.write('data: small\n\n')
  await run.eventCount(1)
  request.res.write(`data: ${'x'.repeat(3 * limit)}\n\ndata: after\n\n`)
  await within(request.cut, 'the app request is cut')
  t.same(settled(await run.outcome()), { status: 'failed', statusCode: 502, resultJson: JSON.stringify({ message }), error: message })
  t.same(run.events, [[0, 'small']], 'the event over the bound is never passed on, nor any after it')
  t.equal(run.cancels(), 0)

  const lines = relay(pool, { maxEventBytes: limit })
  const ndjson = await app.arrived(2)
  ndjson.res.writeHead(200, { 'content-type': 'application/x-ndjson' })
  ndjson.res.write(`"${'y'.repeat(limit)}"\n"after"\n`)
  await within(ndjson.cut, 'the app request is cut')
  t.same(settled(await lines.outcome()), { status: 'failed', statusCode: 502, resultJson: JSON.stringify({ message }), error: message }, 'an NDJSON line too')
  t.same(lines.events, [])
})

t.test('an SSE event just over STREAM_MAX_EVENT_BYTES, its end in the read that passes the bound, fails the run too', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const limit = 65_536
  const run = relay(pool, { maxEventBytes: limit })
  const request = await app.arrived(1)
  request.res.writeHead(200, { 'content-type': 'text/event-stream' })
  // one write: the first read ends before the event does, the second holds its last bytes and its blank line
  request.res.end(`data: ${'x'.repeat(limit + 1000)}\n\n`)
  const outcome = await run.outcome()
  t.same(run.events.filter(([, data]) => data.length > limit).map(([n, data]) => [n, data.length]), [], 'no event longer than the bound passed on')
  t.equal(outcome.statusCode, 502, 'failed 502')
})

t.test('a body over ENVELOPE_MAX_BODY_BYTES fails the run 502 and cuts the app request; a stream over it keeps null', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const big = relay(pool, { maxResultBytes: 16 })
  const request = await app.arrived(1)
  request.res.writeHead(200, { 'content-type': 'application/json' })
  request.res.write(`"${'x'.repeat(32)}`)
  await within(request.cut, 'the app request is cut')
  const message = 'app unreachable: response body over ENVELOPE_MAX_BODY_BYTES (16 bytes)'
  t.same(settled(await big.outcome()), { status: 'failed', statusCode: 502, resultJson: JSON.stringify({ message }), error: message })
  t.equal(big.cancels(), 0)

  const long = relay(pool, { maxResultBytes: 16 })
  const streamed = await app.arrived(2)
  streamed.res.writeHead(200, { 'content-type': 'application/x-ndjson' })
  await stream(long, streamed, [['"0123456789"\n', 1], ['"0123456789"\n', 2]])
  t.same(settled(await long.outcome()), { status: 'succeeded', statusCode: 200, resultJson: 'null', error: undefined }, 'every event still sent, the result no longer kept')
  t.equal(streamed.wasCut(), false)
})

t.test('abort with a cancel: the app request is cut, the run ends canceled 499, the app told once', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const run = relay(pool)
  const request = await app.arrived(1)
  run.relay.abort(new RunCanceledError())
  run.relay.abort(new RunCanceledError())
  await within(request.cut, 'the app request is cut')
  t.same(settled(await run.outcome()), { status: 'canceled', statusCode: 499, resultJson: '{"message":"run canceled"}', error: 'run canceled' })
  t.equal(run.cancels(), 1, 'told once')
})

t.test('abort at the deadline or the grace period\'s end: failed with the sidecar\'s error; a stream keeps that error, not its events', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const late = relay(pool)
  const lateRequest = await app.arrived(1)
  lateRequest.res.writeHead(200, { 'content-type': 'text/event-stream' })
  lateRequest.res.write('data: 1\n\n')
  await late.eventCount(1)
  late.relay.abort(new DeadlineExceededError(2))
  await within(lateRequest.cut, 'the app request is cut')
  t.same(settled(await late.outcome()), { status: 'failed', statusCode: 504, resultJson: '{"message":"request exceeded its deadline of 2s"}', error: 'request exceeded its deadline of 2s' })
  t.equal(late.cancels(), 1)

  const stopped = relay(pool)
  const stoppedRequest = await app.arrived(2)
  stopped.relay.abort(new ReplicaStoppedError())
  await within(stoppedRequest.cut, 'the app request is cut')
  t.same(settled(await stopped.outcome()), { status: 'failed', statusCode: 503, resultJson: '{"message":"replica stopped"}', error: 'replica stopped', interrupted: 'replica stopped' },
    'the grace period\'s end interrupts the attempt')
  t.equal(stopped.cancels(), 1)
})

t.test('abort before the request went out: it never starts, the run ends canceled', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const run = relay(pool)
  run.relay.abort(new RunCanceledError()) // before undici started the request: onRequestStart aborts it
  t.same(settled(await run.outcome()), { status: 'canceled', statusCode: 499, resultJson: '{"message":"run canceled"}', error: 'run canceled' })
  t.equal(run.cancels(), 1)
  const after = relay(pool)
  answer(await app.arrived(1), 200, '"next"')
  t.equal((await after.outcome()).resultJson, '"next"', 'the first request the app got is the next one')
})

t.test('an abort after the run ended changes nothing and tells no one', async t => {
  const app = await testApp(t, request => { answer(request, 200, '{}') })
  const pool = appPool(t, app.origin)
  const run = relay(pool)
  const outcome = await run.outcome()
  run.relay.abort(new RunCanceledError())
  t.equal(outcome.status, 'succeeded')
  t.equal(await run.relay.outcome, outcome)
  t.equal(run.cancels(), 0)
})

t.test('the app unreachable, or dying mid-answer: failed 502; a stream that had begun keeps its events', async t => {
  const nowhere = appPool(t, await deadOrigin())
  const refused = relay(nowhere)
  t.same(settled(await refused.outcome()), {
    status: 'failed', statusCode: 502, resultJson: '{"message":"app unreachable: connection refused"}', error: 'app unreachable: connection refused', interrupted: 'app unreachable'
  }, 'unreachable before it answered: the attempt is interrupted')

  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const half = relay(pool)
  const halfRequest = await app.arrived(1)
  halfRequest.res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
  // destroyed once the answer begun is on its way (a destroy in the same tick drops it unsent)
  halfRequest.res.write('{"partial":', () => { halfRequest.res.destroy() })
  t.same(settled(await half.outcome()), {
    status: 'failed', statusCode: 502, resultJson: '{"message":"app unreachable: connection reset"}', error: 'app unreachable: connection reset'
  })

  const streamed = relay(pool)
  const streamedRequest = await app.arrived(2)
  streamedRequest.res.writeHead(200, { 'content-type': 'text/event-stream' })
  streamedRequest.res.write('data: 1\n\ndata: "two"\n\ndata: unfinished')
  await streamed.eventCount(2)
  streamedRequest.res.destroy()
  t.same(settled(await streamed.outcome()), {
    status: 'failed', statusCode: 502, resultJson: '[1,"two"]', error: 'app unreachable: app failed mid-stream: connection reset'
  })
  t.equal(streamed.cancels(), 0, 'the app\'s own failure: it is not told')
})

t.test('interrupted attempts: the app gone before it answered, and only then; an answer begun, or a cut of the sidecar\'s, is the run\'s outcome', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const silent = relay(pool)
  ;(await app.arrived(1)).res.destroy() // the app process died holding the request, before any answer
  t.same(settled(await silent.outcome()), {
    status: 'failed', statusCode: 502, resultJson: '{"message":"app unreachable: connection reset"}', error: 'app unreachable: connection reset', interrupted: 'app unreachable'
  })
  const answered = relay(pool)
  const answeredRequest = await app.arrived(2)
  answeredRequest.res.writeHead(500, { 'content-type': 'application/json', 'content-length': '100' })
  answeredRequest.res.write('{', () => { answeredRequest.res.destroy() })
  t.equal((await answered.outcome()).interrupted, undefined, 'the app had answered (a 500 begun): not interrupted')
  const late = relay(pool)
  await app.arrived(3)
  late.relay.abort(new DeadlineExceededError(1))
  t.equal((await late.outcome()).interrupted, undefined, 'a deadline: not interrupted')
  const canceled = relay(pool)
  await app.arrived(4)
  canceled.relay.abort(new RunCanceledError())
  t.equal((await canceled.outcome()).interrupted, undefined, 'a cancel: not interrupted')
  const done = relay(pool)
  answer(await app.arrived(5), 503, '"busy"')
  t.same(settled(await done.outcome()), { status: 'failed', statusCode: 503, resultJson: '"busy"', error: 'app answered 503' }, 'any status the app answers: not interrupted')
})

t.test('an event whose recording broke the run (the runner aborts with 500): failed 500, mid-stream or on the last event', async t => {
  const app = await testApp(t)
  const pool = appPool(t, app.origin)
  const internal = (relayed: RunRelay, n: number): void => { if (n === 1) relayed.abort(SIDECAR_INTERNAL) }

  const mid = relay(pool, { onEvent: internal })
  const midRequest = await app.arrived(1)
  midRequest.res.writeHead(200, { 'content-type': 'text/event-stream' })
  midRequest.res.write('data: 0\n\ndata: 1\n\n')
  await within(midRequest.cut, 'the app request is cut')
  t.same(settled(await mid.outcome()), { status: 'failed', statusCode: 500, resultJson: '{"message":"internal error"}', error: 'internal error' })

  // NDJSON's last line without its newline is split only as the body ends
  const last = relay(pool, { onEvent: internal })
  answer(await app.arrived(2), 200, '0\n1', { 'content-type': 'application/x-ndjson' })
  t.same(settled(await last.outcome()), { status: 'failed', statusCode: 500, resultJson: '{"message":"internal error"}', error: 'internal error' })
  t.same(last.events, [[0, '0'], [1, '1']])
})
