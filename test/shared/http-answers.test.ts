import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import pino from 'pino'
import t from 'tap'
import { InflightTracker } from '../../src/lifecycle/inflight-tracker.ts'
import { SIDECAR_INTERNAL } from '../../src/errors.ts'
import { HttpCall } from '../../src/call/http-call.ts'
import { SidecarMetrics } from '../../src/metrics/metrics.ts'
import { MethodNotAllowedError } from '../../src/errors.ts'

// An exception nobody expected is answered 500 {"message":"internal error"} with the run id,
// and logged exactly once with its code and stack; a known error is answered as it is, unlogged.

const lines: Array<Record<string, unknown>> = []
const logger = pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } })
const recorder = { logger, metrics: new SidecarMetrics(), inflight: new InflightTracker() }

const server = createServer((req, res) => {
  const call = new HttpCall(recorder, 'invoke', req, res)
  if (req.url === '/unexpected') {
    const error = new TypeError('cannot read the thing') as TypeError & { code: string }
    error.code = 'ERR_SOMETHING_BROKE'
    call.answer(error)
  } else {
    call.answer(new MethodNotAllowedError('GET'))
  }
})
await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
t.teardown(() => { server.close() })

t.test('an unexpected exception: 500, logged once with its code and stack', async t => {
  const r = await fetch(`${base}/unexpected`, { headers: { 'x-request-id': 'boom-1' } })
  t.equal(r.status, 500)
  t.equal(r.headers.get('x-request-id'), 'boom-1')
  t.equal(r.headers.get('content-type'), 'application/json; charset=utf-8')
  t.equal(await r.text(), SIDECAR_INTERNAL.body())
  t.equal(SIDECAR_INTERNAL.body(), '{"message":"internal error"}')
  const errors = lines.filter(line => line.msg === 'request failed')
  t.equal(errors.length, 1, 'logged exactly once')
  t.equal(errors[0]?.level, 50)
  t.equal(errors[0]?.code, 'ERR_SOMETHING_BROKE')
  t.equal(errors[0]?.runId, 'boom-1')
  t.match((errors[0]?.err as { stack?: string }).stack, /TypeError: cannot read the thing\n\s+at /)
})

t.test('a known error: its own status, body and headers, and no error line', async t => {
  const before = lines.filter(line => line.msg === 'request failed').length
  const r = await fetch(`${base}/known`)
  t.equal(r.status, 405)
  t.equal(r.headers.get('allow'), 'GET')
  t.equal(await r.text(), '{"message":"method not allowed"}')
  t.equal(lines.filter(line => line.msg === 'request failed').length, before)
})
