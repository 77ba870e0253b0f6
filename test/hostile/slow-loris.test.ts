import { connect, type Socket } from 'node:net'
import t from 'tap'
import { type Harness, startHarness, type TestServer } from '../helpers/sidecar-harness.ts'
import { send } from '../helpers/http-client.ts'
import { patient, sleep } from '../helpers/timing.ts'
import { exchange, livez, parseResponses , startTargetEchoApp } from './hostile-kit.ts'

// Slow-loris: clients that hold connections open by sending their headers a byte at a time.
// Node's headersTimeout (60 s in production; 1 s here through the `headersTimeoutMs` option)
// cuts each one with a JSON 408; meanwhile every other caller is served as usual, and nothing of
// the slow requests reaches the app.

const HEADERS_TIMEOUT_MS = 1000
/**
 * The headers timer is checked every quarter of the timeout: a cut lands within 1.25 s, plus scheduling slack, PATIENCE
 * times on a loaded machine; it excludes no cut at all (a timer each byte resets, production's 60 s).
 */
const CUT_BY_MS = patient(HEADERS_TIMEOUT_MS * 1.25 + 1500)
const TIMED_OUT = 'HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: 39\r\n' +
  'connection: close\r\n\r\n{"message":"request headers timed out"}'

let app: TestServer
let h: Harness
let token: string
const seen: string[] = []

t.before(async () => {
  app = await startTargetEchoApp(seen)
  h = await startHarness(app.url, {}, { headersTimeoutMs: HEADERS_TIMEOUT_MS })
  token = await h.token('proj')
})
t.teardown(async () => {
  await h.close()
  await app.close()
})

interface SlowClient {
  /** Resolves when the server closes the connection: what it sent, and when (ms since connect). */
  readonly closed: Promise<{ text: string, afterMs: number }>
  /** Bytes the client managed to send. */
  readonly sent: () => number
  readonly socket: Socket
}

/** A client that sends `head`, then one more header byte every `everyMs`, and never finishes. */
function slowClient (port: number, head: string, everyMs = 50): SlowClient {
  const socket = connect(port, '127.0.0.1')
  const started = Date.now()
  const chunks: Buffer[] = []
  let sent = 0
  let timer: NodeJS.Timeout | undefined
  socket.on('connect', () => {
    socket.write(head)
    sent += head.length
    timer = setInterval(() => {
      if (socket.destroyed || !socket.writable) return
      socket.write('a')
      sent++
    }, everyMs)
  })
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  socket.on('error', () => {})
  const closed = new Promise<{ text: string, afterMs: number }>(resolve => {
    socket.on('close', () => {
      clearInterval(timer)
      resolve({ text: Buffer.concat(chunks).toString('latin1'), afterMs: Date.now() - started })
    })
  })
  return { closed, sent: () => sent, socket }
}

const dribble = (path: string): string => `GET /v4/proj/app${path} HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ${token}\r\nX-Slow: `

t.test('a client dribbling its headers byte by byte is cut with 408 by the headers timeout', async t => {
  const before = seen.length
  const slow = slowClient(h.sidecar.port, dribble('/slow'))
  t.teardown(() => { slow.socket.destroy() })
  const { text, afterMs } = await slow.closed
  t.equal(text, TIMED_OUT)
  t.ok(afterMs >= HEADERS_TIMEOUT_MS - 50, `not before the timeout (${afterMs} ms)`)
  t.ok(afterMs <= CUT_BY_MS, `soon after it (${afterMs} ms)`)
  t.ok(slow.sent() > 10, `it kept sending until then (${slow.sent()} bytes)`)
  t.same(seen.slice(before), [], 'the app saw nothing')
})

t.test('while 200 slow clients hang on, every other caller is served at once', async t => {
  // a first call warms the path (its first use loads code), so the calls below measure only the slow clients' effect
  t.equal((await send(`${h.base}/v4/proj/app/fast`, { headers: { authorization: `Bearer ${token}` } })).status, 200)
  const before = seen.length
  const slow = Array.from({ length: 200 }, (_, i) => slowClient(h.sidecar.port, dribble(`/slow-${i}`), 100))
  t.teardown(() => { for (const client of slow) client.socket.destroy() })
  let allClosed = false
  let cut = 0
  for (const client of slow) void client.closed.then(() => { cut++ })
  const closing = Promise.all(slow.map(client => client.closed)).then(results => { allClosed = true; return results })
  const served: number[] = []
  // served at once is served while every slow client still hangs on (none cut yet), not behind them
  let whileAllHang = 0
  const startedAt = Date.now()
  while (!allClosed && Date.now() - startedAt < patient(4000)) {
    const began = Date.now()
    const r = await send(`${h.base}/v4/proj/app/fast`, { headers: { authorization: `Bearer ${token}` } })
    t.equal(r.status, 200)
    served.push(Date.now() - began)
    if (cut === 0) whileAllHang++
    await sleep(20) // pacing
  }
  const results = await closing
  t.ok(whileAllHang >= 1, `${whileAllHang} of ${served.length} calls served while all 200 hung on (the slowest took ${Math.max(...served)} ms)`)
  t.equal(results.filter(r => r.text === TIMED_OUT).length, 200, 'every slow client got the 408')
  t.ok(Math.max(...results.map(r => r.afterMs)) <= CUT_BY_MS, 'and was cut in time')
  t.same(seen.slice(before).filter(url => url !== '/fast'), [], 'no slow request reached the app')
  t.ok(await livez(h))
})

t.test('a connection that never sends a byte is cut the same way', async t => {
  const x = await exchange(h.sidecar.port, [], { ms: CUT_BY_MS + 500 })
  t.ok(x.closed)
  t.notOk(x.timedOut)
  t.equal(x.bytes.toString('latin1'), TIMED_OUT)
  t.ok(x.elapsedMs >= HEADERS_TIMEOUT_MS - 50 && x.elapsedMs <= CUT_BY_MS, `${x.elapsedMs} ms`)
})

t.test('a kept-alive connection whose second request dribbles is cut too, after its first answer', async t => {
  const before = seen.length
  const slow = slowClient(h.sidecar.port, `GET /v4/proj/app/first HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ${token}\r\n\r\n${dribble('/second')}`)
  t.teardown(() => { slow.socket.destroy() })
  const { text, afterMs } = await slow.closed
  const { responses, rest } = parseResponses(Buffer.from(text, 'latin1'), true)
  t.same(responses.map(r => r.status), [200, 408])
  t.equal(responses[1]?.text, '{"message":"request headers timed out"}')
  t.equal(rest.length, 0)
  t.ok(afterMs <= CUT_BY_MS, `${afterMs} ms`)
  t.same(seen.slice(before), ['/first'], 'only the complete request reached the app')
})

t.test('a slow body is not a headers matter: DEADLINE_SECONDS bounds it with a 504', async t => {
  const bounded = await startHarness(app.url, { DEADLINE_SECONDS: '1' }, { headersTimeoutMs: HEADERS_TIMEOUT_MS })
  t.teardown(async () => { await bounded.close() })
  const before = app.requests.length
  const parts = [`POST /v4/proj/app/slow-body HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ${await bounded.token('proj')}\r\nTransfer-Encoding: chunked\r\n\r\n`]
  // 15 s of body at 50 ms a chunk: longer than the bound below, so a deadline that waited for its end could not pass
  for (let i = 0; i < 300; i++) parts.push('1\r\nx\r\n')
  const x = await exchange(bounded.sidecar.port, parts, { gapMs: 50, responses: 1, ms: patient(4000) })
  t.equal(x.responses[0]?.status, 504)
  t.equal(x.responses[0]?.text, '{"message":"request exceeded its deadline of 1s"}')
  // at the deadline, not before; the bound excludes a deadline counted from the body's end (15 s of chunks away)
  t.ok(x.elapsedMs >= 950 && x.elapsedMs < patient(2500), `${x.elapsedMs} ms`)
  t.equal(app.requests.slice(before).filter(r => r.complete).length, 0, 'the app never got a complete request: its copy was aborted')
})
