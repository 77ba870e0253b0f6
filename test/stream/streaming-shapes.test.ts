import t from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, type Harness, startHarness } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'
import { doneFrame, openStream, readStream, type ScriptedApp, splitBytes, startScriptedApp, type Step, play } from './sse-test-kit.ts'

// Which app responses become SSE, and what the caller then reads: exact events, exact bytes, exact headers.

let app: ScriptedApp
let cortex: Harness
let custom: Harness

t.before(async () => {
  app = await startScriptedApp()
  cortex = await startHarness(app.url)
  custom = await startHarness(app.url, { RUNTIME: 'custom' })
})
t.teardown(async () => {
  await cortex.close()
  await custom.close()
  await app.close()
})

type TestLike = Parameters<ScriptedApp['route']>[0]
const SSE = 'text/event-stream'
const headersFor = async (h: Harness, extra: Record<string, string> = {}): Promise<Record<string, string>> =>
  ({ authorization: `Bearer ${await h.token('proj')}`, ...extra })

/** An app route that answers 200 with `headers`, then plays `steps`, then ends. */
const scripted = (t: TestLike, headers: Record<string, string>, steps: Step[], status = 200): string =>
  app.route(t, async (_req, res) => {
    res.writeHead(status, headers)
    res.flushHeaders()
    await play(res, steps)
    res.end()
  })

const MODES = [
  { name: 'passthrough (text/event-stream)', appHeaders: { 'content-type': 'text/event-stream', 'cache-control': 'public, max-age=60' }, accept: undefined, steps: ['data: one\n\n', 30, 'data: two\n\n'] },
  { name: 'NDJSON', appHeaders: { 'content-type': 'application/x-ndjson', 'cache-control': 'public, max-age=60' }, accept: undefined, steps: ['"one"\n', 30, '"two"\n'] },
  { name: 'chunked + Accept SSE', appHeaders: { 'content-type': 'text/plain', 'cache-control': 'public, max-age=60' }, accept: SSE, steps: ['one', 30, 'two'] }
] as const

for (const [runtime, harness] of [['cortex', () => cortex], ['custom', () => custom]] as const) {
  for (const mode of MODES) {
    t.test(`${runtime}, ${mode.name}: the SSE status and headers, exactly`, async t => {
      const h = harness()
      const path = scripted(t, mode.appHeaders, [...mode.steps])
      const s = await readStream(`${h.base}/v4/proj/app${path}`, await headersFor(h, {
        'x-request-id': 'caller-id_42', ...(mode.accept === undefined ? {} : { accept: mode.accept })
      }))
      t.equal(s.status, 200)
      t.equal(s.headers['content-type'], 'text/event-stream; charset=utf-8')
      t.equal(s.headers['cache-control'], 'no-cache')
      t.equal(s.headers['transfer-encoding'], 'chunked')
      t.equal(s.headers['x-accel-buffering'], 'no')
      t.equal(s.headers['x-request-id'], 'caller-id_42')
      t.equal(s.headers['content-length'], undefined)
      t.same(s.events.map(e => e.data), mode.name === 'NDJSON' ? ['"one"', '"two"'] : ['one', 'two'])
    })
  }
}

t.test('an invalid caller run id is replaced by a UUID on the stream', async t => {
  const path = scripted(t, { 'content-type': 'application/x-ndjson' }, ['1\n'])
  const s = await readStream(`${cortex.base}/v4/proj/app${path}`, await headersFor(cortex, { 'x-request-id': 'bad.id' }))
  t.match(s.headers['x-request-id'], /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
  t.same(s.events.map(e => e.data), ['1'])
})

t.test('passthrough: the exact bytes the app sent arrive unchanged, and parse as the app meant', async t => {
  const parts = [
    ': a comment\r\n',
    'retry: 5000\r\n',
    'id: 1\r\nevent: greet\r\ndata: hello\r\ndata:  world \r\n\r\n',
    ':\n',
    'data: plain\n\n',
    'id: 2\revent: cr\rdata: only-cr\r\r',
    'data: {"json": true}\n\n'
  ]
  const steps: Step[] = parts.flatMap((part, i) => (i === 0 ? [part] : [25, part]))
  const path = scripted(t, { 'content-type': 'text/event-stream; charset=utf-8' }, steps)
  const before = await metric(cortex, 'sidecar_sse_events_total')
  const s = await readStream(`${cortex.base}/v4/proj/app${path}`, await headersFor(cortex))
  t.equal(s.raw(), parts.join(''), 'byte for byte')
  t.same(s.events.map(e => ({ event: e.event, id: e.id, data: e.data })), [
    { event: 'greet', id: '1', data: 'hello\n world ' },
    { event: undefined, id: undefined, data: 'plain' },
    { event: 'cr', id: '2', data: 'only-cr' },
    { event: undefined, id: undefined, data: '{"json": true}' }
  ])
  t.same(s.comments, ['a comment', ''])
  t.equal(await metric(cortex, 'sidecar_sse_events_total') - before, 4, 'counts the events the app sent')
})

t.test('passthrough: the same in RUNTIME=custom, an app status 201 becomes 200', async t => {
  const body = 'event: x\r\ndata: 1\r\n\r\n'
  const path = scripted(t, { 'content-type': 'text/event-stream' }, [body], 201)
  const s = await readStream(`${custom.base}/v4/proj/app${path}`, await headersFor(custom))
  t.equal(s.status, 200)
  t.equal(s.raw(), body)
  t.same(s.events.map(e => [e.event, e.data]), [['x', '1']])
})

for (const type of ['application/x-ndjson', 'application/jsonl', 'application/x-ndjson; charset=utf-8', 'Application/JSONL']) {
  t.test(`${type}: one event per non-empty line, however the lines arrive`, async t => {
    const [e1, e2] = splitBytes('{"s":"café"}\n', 9) // cuts é (C3 A9) between its bytes
    const [j1, j2] = splitBytes('{"s":"日本"}\n', 8) // cuts 日 after its first byte
    const [m1, m2] = splitBytes('{"s":"😀!"}\n', 8) // cuts the emoji after two of its four bytes
    const steps: Step[] = [
      '{"a":1}\n{"b":', 40, '2}\n',
      '\n', '   \n', '\t \r\n', 40,
      '{"c":3}\r\n', 40,
      '  {"spaced": true}  \n',
      e1, 40, e2,
      j1, 40, j2,
      m1, 40, m2, 40,
      '{"last":', 40, 'true}'
    ]
    const path = scripted(t, { 'content-type': type }, steps)
    const before = await metric(cortex, 'sidecar_sse_events_total')
    const s = await readStream(`${cortex.base}/v4/proj/app${path}`, await headersFor(cortex))
    t.equal(s.status, 200)
    const expected = ['{"a":1}', '{"b":2}', '{"c":3}', '  {"spaced": true}  ', '{"s":"café"}', '{"s":"日本"}', '{"s":"😀!"}', '{"last":true}']
    t.same(s.events.map(e => e.data), expected)
    t.notOk(s.raw().includes('\r'), 'no CR survives into the stream')
    t.equal(s.raw(), expected.map(line => `data: ${line}\n\n`).join('') + doneFrame(s.headers['x-request-id'] as string),
      'each line framed as data: <line> and a blank line, then the run\'s done frame')
    t.ok(s.events.every(e => e.event === undefined))
    t.equal(await metric(cortex, 'sidecar_sse_events_total') - before, expected.length)
  })
}

t.test('NDJSON with a Content-Length and nothing but blank lines: a stream with no events', async t => {
  const path = app.route(t, (_req, res) => { res.writeHead(200, { 'content-type': 'application/x-ndjson', 'content-length': '4' }).end('\n \n\n') })
  const s = await readStream(`${custom.base}/v4/proj/app${path}`, await headersFor(custom))
  t.equal(s.status, 200)
  t.equal(s.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.equal(s.headers['content-length'], undefined)
  t.equal(s.raw(), doneFrame(s.headers['x-request-id'] as string), 'only the run\'s done frame')
  t.same(s.events, [])
})

t.test('chunked + Accept SSE: each chunk read is one event; line breaks become several data lines', async t => {
  const [c1, c2] = splitBytes('café ok', 4) // C3 | A9
  const [x1, x2] = splitBytes('x😀y', 2) // x F0 | 9F 98 80 y
  const steps: Step[] = ['one', 80, 'a\nb', 80, 'a\r\nb', 80, 'a\rb', 80, c1, 80, c2, 80, x1, 80, x2, 80, 'end\n']
  const path = scripted(t, { 'content-type': 'text/plain' }, steps)
  const before = await metric(cortex, 'sidecar_sse_events_total')
  const s = await readStream(`${cortex.base}/v4/proj/app${path}`, await headersFor(cortex, { accept: 'application/json;q=0.9, text/event-stream;q=0.5' }))
  t.equal(s.status, 200)
  const expected = ['one', 'a\nb', 'a\nb', 'a\nb', 'caf', 'é ok', 'x', '😀y', 'end\n']
  t.same(s.events.map(e => e.data), expected)
  t.equal(s.raw(), 'data: one\n\n' + 'data: a\ndata: b\n\n'.repeat(3) + 'data: caf\n\n' + 'data: é ok\n\n' +
    'data: x\n\n' + 'data: 😀y\n\n' + 'data: end\ndata: \n\n' + doneFrame(s.headers['x-request-id'] as string))
  t.equal(await metric(cortex, 'sidecar_sse_events_total') - before, expected.length)
})

t.test('chunked + Accept SSE with no content type at all is converted too', async t => {
  const path = scripted(t, {}, ['{"n":1}', 60, '{"n":2}'])
  const s = await readStream(`${custom.base}/v4/proj/app${path}`, await headersFor(custom, { accept: SSE }))
  t.equal(s.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.same(s.events.map(e => e.data), ['{"n":1}', '{"n":2}'])
})

t.test('chunked WITHOUT Accept SSE is not converted: cortex wraps it, custom passes it through', async t => {
  const path = scripted(t, { 'content-type': 'text/plain' }, ['part one, ', 40, 'part two'])
  const wrapped = await send(`${cortex.base}/v4/proj/app${path}`, { headers: await headersFor(cortex, { accept: 'application/json' }) })
  t.equal(wrapped.status, 200)
  t.equal(wrapped.headers['content-type'], 'application/json; charset=utf-8')
  const envelope = wrapped.json() as Record<string, unknown>
  t.same(Object.keys(envelope).sort(), ['result', 'run_id', 'run_time_ms', 'timestamp'])
  t.equal(envelope.result, 'part one, part two')

  const plain = await send(`${custom.base}/v4/proj/app${path}`, { headers: await headersFor(custom) })
  t.equal(plain.status, 200)
  t.equal(plain.headers['content-type'], 'text/plain')
  t.equal(plain.headers['transfer-encoding'], 'chunked')
  t.equal(plain.text, 'part one, part two')
})

t.test('a response with Content-Length is not converted, even with Accept SSE', async t => {
  const path = app.route(t, (_req, res) => { res.writeHead(200, { 'content-type': 'application/json', 'content-length': '9' }).end('{"n": 42}') })
  const wrapped = await send(`${cortex.base}/v4/proj/app${path}`, { headers: await headersFor(cortex, { accept: SSE }) })
  t.equal(wrapped.status, 200)
  t.equal(wrapped.headers['content-type'], 'application/json; charset=utf-8')
  t.same((wrapped.json() as { result: unknown }).result, { n: 42 })

  const plain = await send(`${custom.base}/v4/proj/app${path}`, { headers: await headersFor(custom, { accept: SSE }) })
  t.equal(plain.status, 200)
  t.equal(plain.headers['content-type'], 'application/json')
  t.equal(plain.headers['content-length'], '9')
  t.equal(plain.text, '{"n": 42}')
})

t.test('a non-2xx response is never converted: chunked with Accept SSE, NDJSON, or text/event-stream', async t => {
  const cases = [
    { headers: { 'content-type': 'text/plain' }, status: 500 },
    { headers: { 'content-type': 'application/x-ndjson' }, status: 503 },
    { headers: { 'content-type': 'text/event-stream' }, status: 429 }
  ]
  for (const c of cases) {
    const path = scripted(t, c.headers, ['line 1\n', 40, 'line 2\n'], c.status)
    for (const h of [cortex, custom]) {
      const r = await send(`${h.base}/v4/proj/app${path}`, { headers: await headersFor(h, { accept: SSE, 'x-request-id': 'nope-1' }) })
      t.equal(r.status, c.status, `${c.status} kept`)
      t.equal(r.headers['content-type'], c.headers['content-type'])
      t.equal(r.headers['x-request-id'], 'nope-1')
      t.equal(r.text, 'line 1\nline 2\n', 'body unchanged')
    }
  }
})

t.test('a 204 or a HEAD is not converted', async t => {
  const path = app.route(t, (req, res) => {
    if (req.method === 'HEAD') res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end()
    else res.writeHead(204).end()
  })
  const noContent = await send(`${custom.base}/v4/proj/app${path}`, { headers: await headersFor(custom, { accept: SSE }) })
  t.equal(noContent.status, 204)
  t.equal(noContent.text, '')
  const head = await send(`${custom.base}/v4/proj/app${path}`, { method: 'HEAD', headers: await headersFor(custom, { accept: SSE }) })
  t.equal(head.status, 200)
  t.equal(head.headers['content-type'], 'application/x-ndjson')
})

t.test('a gzip-encoded NDJSON body is not converted (the sidecar cannot split compressed bytes)', async t => {
  const path = app.route(t, (_req, res) => { res.writeHead(200, { 'content-type': 'application/x-ndjson', 'content-encoding': 'gzip' }).end(Buffer.from([0x1f, 0x8b])) })
  const r = await send(`${custom.base}/v4/proj/app${path}`, { headers: await headersFor(custom) })
  t.equal(r.status, 200)
  t.equal(r.headers['content-type'], 'application/x-ndjson')
  t.equal(r.headers['content-encoding'], 'gzip')
  t.same([...r.body], [0x1f, 0x8b])
})

t.test('sidecar_sse_streams is 1 while a stream is open; the access line is written once, when it ends', async t => {
  let release: () => void = () => {}
  const released = new Promise<void>(resolve => { release = resolve })
  const path = app.route(t, async (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' })
    res.write('{"first":1}\n')
    // open until released, and for 100 ms at least: a duration the access line must cover
    await Promise.all([released, sleep(100)])
    res.end('{"second":2}\n')
  })
  const runId = 'access-log-run-1'
  t.equal(await metric(cortex, 'sidecar_sse_streams'), 0)
  const s = await openStream(`${cortex.base}/v4/proj/app${path}?secret=hidden`, await headersFor(cortex, { 'x-request-id': runId }))
  t.teardown(() => { s.req.destroy() })
  await s.waitForEvents(1)
  t.equal(await metric(cortex, 'sidecar_sse_streams'), 1)
  const linesFor = (): Array<Record<string, unknown>> => cortex.logs.filter(line => line.runId === runId)
  // a later call's access line is the event that shows the sidecar has logged what it had to so far
  const quick = app.route(t, (_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('{}') })
  const loggedLater = async (id: string): Promise<void> => {
    t.equal((await send(`${cortex.base}/v4/proj/app${quick}`, { headers: await headersFor(cortex, { 'x-request-id': id }) })).status, 200)
    await eventually(() => cortex.logs.some(line => line.runId === id))
  }
  await loggedLater('access-log-later-1')
  t.same(linesFor(), [], 'no access line while the stream is open')

  release()
  await s.done
  t.same(s.events.map(e => e.data), ['{"first":1}', '{"second":2}'])
  await eventually(() => linesFor().length === 1)
  await eventually(async () => await metric(cortex, 'sidecar_sse_streams') === 0)
  await loggedLater('access-log-later-2')
  const lines = linesFor()
  t.equal(lines.length, 1, 'exactly one line')
  const line = lines[0] as Record<string, unknown>
  t.equal(line.msg, 'request')
  t.equal(line.status, 200)
  t.equal(line.method, 'GET')
  t.equal(line.path, `/v4/proj/app${path}`)
  t.equal(line.aborted, undefined)
  t.ok(typeof line.duration === 'number' && line.duration >= 100, 'duration covers the whole stream')
})
