import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { metric } from '../../helpers/admin-metrics.ts'
import { send } from '../../helpers/http-client.ts'
import { type HeldRequest, runsAppFor, runsClient, type RunsApp, type RunsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { eventually, type Harness } from '../../helpers/sidecar-harness.ts'
import { patient } from '../../helpers/timing.ts'
import type { OpenStream } from '../../stream/sse-test-kit.ts'

const appFor = runsAppFor
const sidecarFor = async (t: Test, appUrl: string, env: Record<string, string> = {}): Promise<Harness> => await runsSidecarFor(t, appUrl, { DISABLE_AUTH: 'true', ...env })

/** Submits an NDJSON run, writes `lines` one read at a time, ends it, and returns its final record text. */
async function ndjsonRun (app: RunsApp, client: RunsClient, runId: string, lines: string[]): Promise<string> {
  const submitted = await client.submit('/ndjson', runId)
  if (submitted.status !== 202) throw new Error(`submit ${runId}: ${submitted.status} ${submitted.text}`)
  const held = await app.waitForHeld(app.held.length + 1)
  const reader = await client.follow(runId)
  for (const [i, line] of lines.entries()) {
    held.res.write(line + '\n')
    await reader.waitForEvents(i + 1)
  }
  held.res.end()
  await reader.done
  return (await client.finished(runId)).response.text
}

const framed = (lines: string[], from = 0): string => lines.slice(from).map((line, i) => `id: ${from + i}\ndata: ${line}\n\n`).join('')
/** The done event: its id, `<run_id>.done`, stops an EventSource (a reconnect with it gets 204). */
const doneFrame = (record: string): string => `id: ${(JSON.parse(record) as { run_id: string }).run_id}.done\nevent: done\ndata: ${record}\n\n`

t.test('the events of a finished run, from the first: SSE headers, id lines, then done with the record, then the stream closes', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const client = runsClient({ base: h.base })
  const lines = ['{"token":"a"}', 'plain', '{"token":"c"}']
  const record = await ndjsonRun(app, client, 'finished-stream', lines)
  const reader = await client.follow('finished-stream', { headers: { 'x-request-id': 'reader-1' } })
  await reader.done
  t.equal(reader.status, 200)
  t.equal(reader.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(reader.headers['cache-control'], 'no-cache')
  t.equal(reader.headers['x-accel-buffering'], 'no')
  t.equal(reader.headers['transfer-encoding'], 'chunked')
  t.equal(reader.headers['x-request-id'], 'reader-1', 'the reader\'s own request id')
  t.equal(reader.headers['content-length'], undefined)
  t.equal(reader.raw(), framed(lines) + doneFrame(record), 'the stream, byte for byte')
  t.ok(reader.res.complete, 'the stream ended cleanly after done')
  t.same(reader.events.map(e => [e.id, e.event, e.data]), [['0', undefined, lines[0]], ['1', undefined, 'plain'], ['2', undefined, lines[2]], ['finished-stream.done', 'done', record]])
  t.equal(JSON.parse(record).status, 'succeeded')
  t.same(JSON.parse(record).result, [{ token: 'a' }, 'plain', { token: 'c' }])
})

t.test('where a reader starts: Last-Event-ID, ?after=, the header winning, and what is refused', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base })
  const lines = ['e0', 'e1', 'e2', 'e3']
  const record = await ndjsonRun(app, client, 'resumable', lines)
  const starts = [
    [{ 'last-event-id': '0' }, '', 1],
    [{ 'last-event-id': '2' }, '', 3],
    [{ 'last-event-id': '3' }, '', 4],
    [{}, '?after=1', 2],
    [{}, '?after=0&x=1', 1],
    [{ 'last-event-id': '2' }, '?after=0', 3],
    [{ 'last-event-id': '0' }, '?after=3', 1],
    [{}, '?other=1', 0]
  ] as const
  for (const [headers, query, from] of starts) {
    const reader = await client.follow('resumable', { headers, query })
    await reader.done
    t.equal(reader.raw(), framed(lines, from) + doneFrame(record), `${JSON.stringify(headers)} ${query}: from event ${from}`)
  }
  const refusals = [
    [{ 'last-event-id': 'x' }, '', 'Last-Event-ID must be an event number (0, 1, 2, …)'],
    [{ 'last-event-id': '-1' }, '', 'Last-Event-ID must be an event number (0, 1, 2, …)'],
    [{ 'last-event-id': '1.5' }, '', 'Last-Event-ID must be an event number (0, 1, 2, …)'],
    [{ 'last-event-id': '1e1' }, '', 'Last-Event-ID must be an event number (0, 1, 2, …)'],
    [{ 'last-event-id': '9'.repeat(20) }, '', 'Last-Event-ID must be an event number (0, 1, 2, …)'],
    [{ 'last-event-id': 'x' }, '?after=1', 'Last-Event-ID must be an event number (0, 1, 2, …)'],
    [{}, '?after=', 'after must be an event number (0, 1, 2, …)'],
    [{}, '?after=-1', 'after must be an event number (0, 1, 2, …)'],
    [{}, '?after=0x1', 'after must be an event number (0, 1, 2, …)'],
    [{}, '?after=4', 'event 4 does not exist: the last event is 3'],
    [{ 'last-event-id': '17' }, '?after=0', 'event 17 does not exist: the last event is 3']
  ] as const
  for (const [headers, query, message] of refusals) {
    const r = await send(client.runUrl('resumable', `/events${query}`), { headers: { ...headers, 'x-request-id': 'refused-reader' } })
    t.equal(r.status, 400, `${JSON.stringify(headers)} ${query}`)
    t.equal(r.text, JSON.stringify({ message }))
    t.equal(r.headers['content-type'], 'application/json; charset=utf-8')
    t.equal(r.headers['x-request-id'], 'refused-reader')
  }

  // a run with no event yet: any start after an event is beyond the last
  const blocker = client.call('/hold/blocker', { method: 'GET' })
  const blockerHeld = await app.waitForHeld(2)
  await client.submit('/ndjson', 'not-started')
  const early = await send(client.runUrl('not-started', '/events?after=0'))
  t.equal(early.status, 400)
  t.equal(early.text, '{"message":"event 0 does not exist: the run has no events yet"}')
  t.equal((await send(client.runUrl('no-such-run', '/events'))).text, '{"message":"no such run"}')
  blockerHeld.res.writeHead(200).end('{}')
  await blocker
  const started = await app.waitForHeld(3)
  started.res.end()
  t.equal((await client.finished('not-started')).record.status, 'succeeded')
})

t.test('a multi-line value is one event of several data: lines', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const client = runsClient({ base: h.base })
  await client.submit('/sse', 'lines-sse')
  const sse = await app.waitForHeld(1)
  sse.res.end('data: first\ndata: second\n\ndata: {"x":\ndata: 1}\n\n')
  await client.finished('lines-sse')
  const sseReader = await client.follow('lines-sse', { query: '?after=0' })
  await sseReader.done
  t.match(sseReader.raw(), /^id: 1\ndata: \{"x":\ndata: 1\}\n\nid: lines-sse\.done\nevent: done\n/)
  const sseRecord = (await client.read('lines-sse')).record
  t.same(sseRecord.result, ['first\nsecond', { x: 1 }], 'values with line breaks, parsed when JSON')

  await client.submit('/chunks', 'lines-chunks', { headers: { accept: 'text/event-stream' } })
  const chunks = await app.waitForHeld(2)
  chunks.res.end('one\r\ntwo\rthree\nfour')
  await client.finished('lines-chunks')
  const chunkReader = await client.follow('lines-chunks')
  await chunkReader.done
  t.match(chunkReader.raw(), /^id: 0\ndata: one\ndata: two\ndata: three\ndata: four\n\nid: lines-chunks\.done\nevent: done\n/)
  t.equal(chunkReader.events[0]?.data, 'one\ntwo\nthree\nfour')
})

/** Writes `values` as NDJSON one at a time, each once every reader has the one before; returns when each was written. */
async function writePaced (held: HeldRequest, readers: OpenStream[], values: string[]): Promise<number[]> {
  const writtenAt: number[] = []
  for (const [i, value] of values.entries()) {
    writtenAt.push(performance.now())
    held.res.write(value + '\n')
    for (const reader of readers) await reader.waitForEvents(i + 1)
  }
  return writtenAt
}

t.test('live events reach every reader as the app writes them, each before the next is written, not at a keep-alive', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const client = runsClient({ base: h.base })
  await client.submit('/ndjson', 'live')
  const held = await app.waitForHeld(1)
  const readers = await Promise.all([client.follow('live'), client.follow('live'), client.follow('live', { query: '?x=1' })])
  await eventually(async () => await metric(h, 'sidecar_sse_streams') === 3)
  t.same(readers.map(r => r.events.length), [0, 0, 0], 'nothing before the app writes')
  const values = ['{"i":0}', '{"i":1}', '{"i":2}', '{"i":3}', '{"i":4}']
  const writtenAt = await writePaced(held, readers, values)
  for (const [r, reader] of readers.entries()) {
    const delays = reader.events.map((e, i) => e.at - (writtenAt[i] as number))
    // writePaced proves each came before the next was written; a flush only at the 15 s keep-alive is far past the scaled bound
    t.ok(delays.every(d => d >= 0 && d < patient(1000)), `reader ${r}: delays ${delays.map(d => d.toFixed(1)).join(', ')} ms`)
  }
  held.res.end()
  await Promise.all(readers.map(async r => await r.done))
  const record = (await client.read('live')).response.text
  for (const reader of readers) t.equal(reader.raw(), framed(values) + doneFrame(record), 'every reader got the same stream')
  await eventually(async () => await metric(h, 'sidecar_sse_streams') === 0)
})

t.test('a reader that leaves does not affect the run or the other readers', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const client = runsClient({ base: h.base })
  await client.submit('/ndjson', 'left')
  const held = await app.waitForHeld(1)
  const leaving = await client.follow('left')
  const staying = await client.follow('left')
  await writePaced(held, [leaving, staying], ['a', 'b'])
  leaving.req.destroy()
  await leaving.done
  await eventually(async () => await metric(h, 'sidecar_sse_streams') === 1)
  await writePaced(held, [], ['c'])
  await staying.waitForEvents(3)
  held.res.end('d\n')
  await staying.done
  t.notOk(held.wasCut(), 'the app request went on')
  const { record, response } = await client.finished('left')
  t.equal(record.status, 'succeeded')
  t.same(record.result, ['a', 'b', 'c', 'd'])
  t.equal(staying.raw(), framed(['a', 'b', 'c', 'd']) + doneFrame(response.text))
  t.same(leaving.events.map(e => e.data), ['a', 'b'])
})

t.test('a run that is not a stream gets only done; a reader of a queued run waits for it', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base })
  const blocker = client.call('/hold/blocker', { method: 'GET' })
  const blockerHeld = await app.waitForHeld(1)
  await client.submit('/json', 'plain-run', { body: 'x' })
  const early = await client.follow('plain-run')
  t.equal(early.status, 200, 'a queued run can be followed')
  t.equal((await client.read('plain-run')).record.status, 'queued')
  t.notOk(early.ended())
  t.equal(early.raw(), '')
  blockerHeld.res.writeHead(200).end('{}')
  await blocker
  await early.done
  const { response } = await client.finished('plain-run')
  t.equal(early.raw(), doneFrame(response.text), 'only done, with the final record')
  const late = await client.follow('plain-run')
  await late.done
  t.equal(late.raw(), doneFrame(response.text))
})

t.test('RUN_MAX_EVENTS: events no longer kept are announced by an error event, then the reader goes on from the first kept', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { RUN_MAX_EVENTS: '3' })
  const client = runsClient({ base: h.base })
  await client.submit('/ndjson', 'trimmed')
  const held = await app.waitForHeld(1)
  const live = await client.follow('trimmed')
  const values = ['v0', 'v1', 'v2', 'v3', 'v4', 'v5', 'v6']
  await writePaced(held, [live], values)
  const midway = await client.follow('trimmed')
  await midway.waitForEvents(4)
  t.same(midway.events.map(e => [e.event, e.id, e.data]), [
    ['error', undefined, '{"message":"events before 4 are no longer kept"}'], [undefined, '4', 'v4'], [undefined, '5', 'v5'], [undefined, '6', 'v6']
  ], 'a reader starting while the run goes on')
  held.res.end()
  await live.done
  await midway.done
  const record = (await client.read('trimmed')).response.text
  t.equal(live.raw(), framed(values) + doneFrame(record), 'a reader keeping up gets every event')
  const gap = 'event: error\ndata: {"message":"events before 4 are no longer kept"}\n\n'
  const starts = [
    [{}, '', gap + framed(values, 4)],
    [{}, '?after=2', gap + framed(values, 4)],
    [{ 'last-event-id': '3' }, '', framed(values, 4)],
    [{}, '?after=4', framed(values, 5)],
    [{ 'last-event-id': '6' }, '', '']
  ] as const
  for (const [headers, query, expected] of starts) {
    const reader = await client.follow('trimmed', { headers, query })
    await reader.done
    t.equal(reader.raw(), expected + doneFrame(record), `${JSON.stringify(headers)}${query}`)
  }
  t.same(JSON.parse(record).result, values, 'the result keeps every value')
})

t.test('idle readers get keep-alive comments; a run that fails mid-stream ends its events with done', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { SSE_HEARTBEAT_SECONDS: '0.1' })
  const client = runsClient({ base: h.base })
  await client.submit('/ndjson', 'idle')
  const held = await app.waitForHeld(1)
  held.res.write('{"n":0}\n')
  const reader = await client.follow('idle')
  await reader.waitForEvents(1)
  await eventually(() => reader.raw().includes(': keep-alive\n\n'), 2000)
  t.equal(reader.events.length, 1, 'comments are not events')
  held.res.destroy() // the app fails mid-stream
  await reader.done
  const { record, response } = await client.finished('idle')
  t.equal(record.status, 'failed')
  t.equal(record.status_code, 502)
  t.same(record.result, [{ n: 0 }], 'the events so far')
  t.same(record.error, { message: 'app unreachable: app failed mid-stream: connection reset' })
  t.same(reader.events.map(e => [e.id, e.event]), [['0', undefined], ['idle.done', 'done']])
  t.equal(reader.events[1]?.data, response.text)
  t.match(reader.raw(), /^id: 0\ndata: \{"n":0\}\n\n(: keep-alive\n\n)+id: idle\.done\nevent: done\n/)
})

t.test('DEADLINE_SECONDS on a reader: its stream ends with an error event, not a cut connection; it resumes where it stopped', async t => {
  const app = await appFor(t)
  app.ready = false // the run waits in the queue longer than a reader's deadline
  const h = await sidecarFor(t, app.url, { DEADLINE_SECONDS: '0.5', READYCHECK_PATH: '/ready' })
  const client = runsClient({ base: h.base })
  await client.submit('/ndjson', 'outlived')
  const reader = await client.follow('outlived')
  const openedAt = performance.now()
  await reader.done
  const openFor = performance.now() - openedAt
  t.ok(reader.res.complete, 'the stream ended cleanly')
  t.equal(reader.raw(), 'event: error\ndata: {"message":"request exceeded its deadline of 0.5s"}\n\n')
  t.ok(openFor >= 400, `ended at the deadline, not before (${Math.round(openFor)} ms)`)
  // the run stays queued (the app not ready): only the 0.5 s deadline ends the stream, not one counted 10x too long
  t.ok(openFor < patient(1500), `ended at the deadline, not much later (${Math.round(openFor)} ms)`)
  t.equal((await client.read('outlived')).record.status, 'queued', 'the run is not affected')
  app.ready = true
  const held = await app.waitForHeld(1)
  held.res.end('first\n')
  const { response } = await client.finished('outlived')
  t.equal(JSON.parse(response.text).status, 'succeeded')
  const again = await client.follow('outlived')
  await again.done
  t.equal(again.raw(), framed(['first']) + doneFrame(response.text))
})
