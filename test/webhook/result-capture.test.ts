import t from 'tap'
import { ResultCapture, webhookBody } from '../../src/webhook/result-capture.ts'
import { ENVELOPE_KEYS } from './webhook-kit.ts'

const TS = '2025-01-02T03:04:05.678Z'
const body = (capture: ResultCapture, runId = 'run-1', ms = 12.5): Record<string, unknown> =>
  JSON.parse(webhookBody(runId, capture, ms, TS)) as Record<string, unknown>

t.test('a plain body: result is the parsed JSON, else the text; exactly the five keys in order', async t => {
  const json = new ResultCapture(1000)
  json.status = 201
  json.body(Buffer.from('{"a": [1, '))
  json.body(Buffer.from('"two"]}'))
  const text = webhookBody('run-1', json, 12.5, TS)
  t.equal(text, '{"run_id":"run-1","status_code":201,"result":{"a": [1, "two"]},"run_time_ms":12.5,"timestamp":"2025-01-02T03:04:05.678Z"}',
    'the app JSON is embedded as sent')
  t.same(Object.keys(JSON.parse(text) as object), ENVELOPE_KEYS)

  const plain = new ResultCapture(1000)
  plain.status = 500
  plain.body(Buffer.from('internal error, "quoted"\n'))
  t.same(body(plain), { run_id: 'run-1', status_code: 500, result: 'internal error, "quoted"\n', run_time_ms: 12.5, timestamp: TS })

  const empty = new ResultCapture(1000)
  empty.status = 204
  t.same(body(empty), { run_id: 'run-1', status_code: 204, result: '', run_time_ms: 12.5, timestamp: TS }, 'no body: the empty string')

  const scalar = new ResultCapture(1000)
  scalar.status = 200
  scalar.body(Buffer.from(' 42 '))
  t.equal(body(scalar).result, 42)
})

t.test('a multi-byte character split across chunks survives', async t => {
  const capture = new ResultCapture(1000)
  capture.status = 200
  const bytes = Buffer.from('"héllo ✓ 😀"')
  capture.body(bytes.subarray(0, 3))
  capture.body(bytes.subarray(3, 10))
  capture.body(bytes.subarray(10))
  t.equal(body(capture).result, 'héllo ✓ 😀')
  t.equal(capture.size, bytes.length)
})

t.test('events: the array of values in order, each parsed when JSON', async t => {
  const capture = new ResultCapture(1000)
  capture.status = 200
  for (const data of ['{"n":1}', 'hello', '[1,2]', '"quoted"', 'line1\nline2', '3.5', 'null', '{broken']) capture.event(data)
  t.same(body(capture).result, [{ n: 1 }, 'hello', [1, 2], 'quoted', 'line1\nline2', 3.5, null, '{broken'])
  const none = new ResultCapture(1000)
  none.status = 200
  none.event('')
  t.same(body(none).result, [''], 'an empty event value is an empty string')
})

t.test('past WEBHOOK_MAX_BODY_BYTES: "result": null, "truncated": true, and nothing more is kept', async t => {
  const exact = new ResultCapture(10)
  exact.status = 200
  exact.body(Buffer.from('"12345'))
  exact.body(Buffer.from('678"'))
  t.equal(exact.truncated, false, 'exactly the limit is kept')
  t.same(body(exact), { run_id: 'run-1', status_code: 200, result: '12345678', run_time_ms: 12.5, timestamp: TS })

  const over = new ResultCapture(10)
  over.status = 200
  over.body(Buffer.from('"12345'))
  over.body(Buffer.from('6789"'))
  over.body(Buffer.from('more'))
  t.equal(over.truncated, true)
  t.equal(over.size, 0, 'what was kept is let go')
  const text = webhookBody('run-1', over, 1, TS)
  t.equal(text, `{"run_id":"run-1","status_code":200,"result":null,"run_time_ms":1,"timestamp":"${TS}","truncated":true}`)
  t.same(Object.keys(JSON.parse(text) as object), [...ENVELOPE_KEYS, 'truncated'])

  const events = new ResultCapture(8)
  events.status = 200
  events.event('1234')
  events.event('5678')
  t.equal(events.truncated, false)
  events.event('9')
  t.equal(events.truncated, true, 'events count their bytes too')
  t.same(body(events), { run_id: 'run-1', status_code: 200, result: null, run_time_ms: 12.5, timestamp: TS, truncated: true })

  const multibyte = new ResultCapture(5)
  multibyte.status = 200
  multibyte.event('✓✓')
  t.equal(multibyte.truncated, true, 'bytes, not characters, are counted (6 bytes > 5)')

  const zero = new ResultCapture(0)
  zero.status = 200
  t.same(body(zero).result, '', 'a limit of 0 keeps an empty body')
  zero.body(Buffer.from('x'))
  t.equal(zero.truncated, true)
})

t.test('replace(): the sidecar\'s own answer (502/504) is what gets reported', async t => {
  const capture = new ResultCapture(10)
  capture.status = 200
  capture.body(Buffer.from('way more than ten bytes'))
  t.equal(capture.truncated, true)
  capture.replace(502, '{"message":"app unreachable: connection reset"}')
  t.equal(capture.truncated, false)
  t.equal(capture.status, 502)
  const parsed = body(capture)
  t.same(parsed, { run_id: 'run-1', status_code: 502, result: { message: 'app unreachable: connection reset' }, run_time_ms: 12.5, timestamp: TS })
  t.notOk('truncated' in parsed)

  const streamed = new ResultCapture(1000)
  streamed.event('a')
  streamed.replace(504, '{"message":"deadline"}')
  t.same(body(streamed).result, { message: 'deadline' }, 'events are dropped for the replacement')
})

t.test('the run id is JSON-escaped', async t => {
  const capture = new ResultCapture(100)
  capture.status = 200
  t.equal(body(capture, 'a"b\\c').run_id, 'a"b\\c')
})
