import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { type Harness, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { exchange, livez, MALFORMED, messageOf } from './hostile-kit.ts'

// Request smuggling: framing the sidecar's parser (Node's llhttp, strict by default) and the app's
// parser could read differently. Every ambiguous message must get a 400 (or a closed connection)
// before anything is forwarded; a request hidden after or inside another must never reach the app
// unless it is a real, separately authorised request.

let app: TestServer
let h: Harness
let token: string
/** Request targets in the order the app saw their headers (complete or not). */
const seen: string[] = []

t.before(async () => {
  app = await startTestServer((req, res, body) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ url: req.url, body: body.toString('latin1') }))
  })
  app.server.on('request', req => { seen.push(req.url as string) })
  h = await startHarness(app.url, { PROJECT_ID: 'proj', APP_NAME: 'app' })
  token = await h.token('proj')
})
t.teardown(async () => {
  await h.close()
  await app.close()
})

const head = (method: string, path: string, lines: string): string =>
  `${method} /v4/proj/app${path} HTTP/1.1\r\nHost: sidecar.test\r\nAuthorization: Bearer ${token}\r\n${lines}`

/** A complete, authorised request that must never be forwarded when it hides behind a bad one. */
const smuggled = (): string => `GET /v4/proj/app/smuggled HTTP/1.1\r\nHost: sidecar.test\r\nAuthorization: Bearer ${token}\r\n\r\n`

/** Each case: the bytes of an ambiguous request, followed by a smuggled authorised one. */
const refused: Array<[string, () => string]> = [
  ['CL.TE: Content-Length and Transfer-Encoding together', () => head('POST', '/a', 'Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nX') + smuggled()],
  ['TE.CL: Transfer-Encoding before Content-Length', () => head('POST', '/a', `Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n5c\r\n${smuggled()}\r\n0\r\n\r\n`)],
  ['two different Content-Length headers', () => head('POST', '/a', 'Content-Length: 4\r\nContent-Length: 50\r\n\r\nabcd') + smuggled()],
  ['two equal Content-Length headers', () => head('POST', '/a', 'Content-Length: 4\r\nContent-Length: 4\r\n\r\nabcd') + smuggled()],
  ['a Content-Length list "4, 4"', () => head('POST', '/a', 'Content-Length: 4, 4\r\n\r\nabcd') + smuggled()],
  ['Content-Length with a plus sign', () => head('POST', '/a', 'Content-Length: +4\r\n\r\nabcd') + smuggled()],
  ['Content-Length in hex', () => head('POST', '/a', 'Content-Length: 0x4\r\n\r\nabcd') + smuggled()],
  ['Content-Length negative', () => head('POST', '/a', 'Content-Length: -1\r\n\r\n') + smuggled()],
  ['Content-Length beyond 2^64', () => head('POST', '/a', 'Content-Length: 99999999999999999999999\r\n\r\n') + smuggled()],
  ['Transfer-Encoding: chunked, identity (chunked not last)', () => head('POST', '/a', 'Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n') + smuggled()],
  ['Transfer-Encoding: xchunked', () => head('POST', '/a', 'Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n') + smuggled()],
  ['Transfer-Encoding: identity (not chunked)', () => head('POST', '/a', 'Transfer-Encoding: identity\r\n\r\n') + smuggled()],
  ['Transfer-Encoding twice', () => head('POST', '/a', 'Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n') + smuggled()],
  ['Transfer-Encoding: chunked, chunked', () => head('POST', '/a', 'Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n') + smuggled()],
  ['a space before the colon: "Transfer-Encoding : chunked"', () => head('POST', '/a', 'Content-Length: 5\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n') + smuggled()],
  ['a vertical tab before the value', () => head('POST', '/a', 'Transfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n') + smuggled()],
  ['obs-fold: Transfer-Encoding folded into the previous header (space)', () => head('POST', '/a', `Content-Length: 5\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled()}`)],
  ['obs-fold: a continuation line starting with a tab', () => head('GET', '/a', 'X-A: a\r\n\tb\r\n\r\n') + smuggled()],
  ['obs-fold: the first header line starts with a space', () => `GET /v4/proj/app/a HTTP/1.1\r\n Host: sidecar.test\r\nAuthorization: Bearer ${token}\r\n\r\n${smuggled()}`],
  ['bare LF line endings throughout', () => (head('GET', '/a', '\r\n') + smuggled()).replaceAll('\r\n', '\n')],
  ['a bare LF after the request line only', () => head('GET', '/a', '\r\n').replace(' HTTP/1.1\r\n', ' HTTP/1.1\n') + smuggled()],
  ['a bare CR inside the header block', () => head('GET', '/a', 'X-A: a\rTransfer-Encoding: chunked\r\n\r\n') + smuggled()],
  ['a NUL byte in a header value', () => head('GET', '/a', 'X-A: a\x00b\r\n\r\n') + smuggled()],
  ['a chunk size that is not hex', () => head('POST', '/a', `Transfer-Encoding: chunked\r\n\r\nzz\r\n${smuggled()}\r\n0\r\n\r\n`)],
  ['a chunk size overflowing 64 bits', () => head('POST', '/a', `Transfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\nabc\r\n0\r\n\r\n${smuggled()}`)],
  ['chunks framed with bare LF', () => head('POST', '/a', `Transfer-Encoding: chunked\r\n\r\n3\nabc\n0\n\n${smuggled()}`)],
  ['a header name with a space', () => head('GET', '/a', 'Bad Name: x\r\n\r\n') + smuggled()],
  ['an unknown method', () => `SMUGGLE /v4/proj/app/a HTTP/1.1\r\nHost: sidecar.test\r\n\r\n${smuggled()}`],
  ['a lower-case method', () => `get /v4/proj/app/a HTTP/1.1\r\nHost: sidecar.test\r\n\r\n${smuggled()}`],
  ['the HTTP/2 preface on an HTTP/1.1 port', () => `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n${smuggled()}`]
]

for (const [name, bytes] of refused) {
  t.test(`400, connection closed, nothing forwarded: ${name}`, async t => {
    const before = { seen: seen.length, recorded: app.requests.length }
    const x = await exchange(h.sidecar.port, bytes())
    t.equal(x.malformed, undefined, 'a well-formed HTTP response')
    t.equal(x.responses.length, 1, 'exactly one answer: the smuggled request gets none')
    const [answer] = x.responses
    t.equal(answer?.status, 400)
    t.equal(answer?.headers['content-type'], 'application/json; charset=utf-8')
    t.equal(answer?.headers.connection, 'close')
    t.equal(answer?.text, MALFORMED)
    t.equal(x.rest.length, 0, 'nothing after the answer')
    t.ok(x.closed, 'the sidecar closed the connection')
    t.notOk(x.timedOut)
    t.same(seen.slice(before.seen), [], 'the app saw no request at all')
    t.equal(app.requests.length, before.recorded, 'nor even the headers of one')
  })
}

t.test('a header the parser accepts with optional whitespace is one request, one body, exactly', async t => {
  const variants: Array<[string, string]> = [
    ['Transfer-Encoding:\tchunked', 'a tab as optional whitespace'],
    ['Transfer-Encoding: CHUNKED', 'upper case'],
    ['Transfer-Encoding: chunked  ', 'trailing spaces']
  ]
  for (const [line, label] of variants) {
    const before = seen.length
    const x = await exchange(h.sidecar.port, head('POST', `/ok?v=${encodeURIComponent(label)}`, `${line}\r\nConnection: close\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n`))
    t.equal(x.responses.length, 1, label)
    t.equal(x.responses[0]?.status, 200, label)
    t.same((JSON.parse(x.responses[0]?.text ?? '{}') as { result: unknown }).result, { url: `/ok?v=${encodeURIComponent(label)}`, body: 'abcde' }, label)
    t.same(seen.slice(before), [`/ok?v=${encodeURIComponent(label)}`], `${label}: the app saw exactly this request`)
    const forwarded = app.requests[app.requests.length - 1]
    t.equal(forwarded?.headers['transfer-encoding'], 'chunked', `${label}: the app gets a plain chunked body`)
    t.equal(forwarded?.headers['content-length'], undefined, `${label}: and no Content-Length beside it`)
  }
})

t.test('a request hidden after a chunked body is parsed as its own request, and without a token it is refused', async t => {
  const before = seen.length
  const hidden = 'GET /v4/proj/app/smuggled HTTP/1.1\r\nHost: sidecar.test\r\nConnection: close\r\n\r\n'
  const x = await exchange(h.sidecar.port, head('POST', '/first', `Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n${hidden}`), { responses: 2 })
  t.equal(x.responses.length, 2)
  t.equal(x.responses[0]?.status, 200, 'the real request')
  t.equal(x.responses[1]?.status, 401, 'the hidden one went through auth like any other request')
  t.equal(messageOf(x.responses[1] as never), 'missing bearer token')
  t.same(seen.slice(before), ['/first'], 'the app saw only the real request')
  t.equal(app.requests[app.requests.length - 1]?.body.toString(), 'abc')
})

t.test('a request inside a Content-Length body is only body bytes', async t => {
  const before = seen.length
  const hidden = smuggled()
  const x = await exchange(h.sidecar.port, head('POST', '/carrier', `Content-Length: ${hidden.length}\r\nConnection: close\r\n\r\n${hidden}`))
  t.equal(x.responses.length, 1)
  t.equal(x.responses[0]?.status, 200)
  t.same(seen.slice(before), ['/carrier'])
  t.equal(app.requests[app.requests.length - 1]?.body.toString('latin1'), hidden, 'forwarded byte for byte as a body')
})

t.test('Connection naming framing headers cannot strip the framing the app relies on', async t => {
  const before = seen.length
  const x = await exchange(h.sidecar.port, head('POST', '/framed', 'Connection: close, Content-Length, Transfer-Encoding, Host\r\nContent-Length: 5\r\n\r\nhello') + smuggled())
  t.equal(x.responses.length, 1, 'Connection: close holds; the bytes after the body are not read')
  t.equal(x.responses[0]?.status, 200)
  t.same(seen.slice(before), ['/framed'])
  const forwarded = app.requests[app.requests.length - 1]
  t.equal(forwarded?.body.toString(), 'hello')
  t.equal(forwarded?.headers['content-length'], '5', 'the sidecar frames the forwarded body itself')
})

t.test('pipelined authorised requests are answered in order, one forward each', async t => {
  const before = seen.length
  const x = await exchange(h.sidecar.port, head('GET', '/one', '\r\n') + head('POST', '/two', 'Content-Length: 3\r\n\r\nxyz') + head('GET', '/three', 'Connection: close\r\n\r\n'))
  t.same(x.responses.map(r => r.status), [200, 200, 200])
  t.same(x.responses.map(r => (JSON.parse(r.text) as { result: { url: string } }).result.url), ['/one', '/two', '/three'])
  t.same(seen.slice(before).sort(), ['/one', '/three', '/two'], 'one forward each (the sidecar works on pipelined requests at once)')
  t.ok(x.closed)
})

t.test('absolute-form targets and CONNECT: the sidecar is no forward proxy', async t => {
  const before = seen.length
  for (const target of [`http://127.0.0.1:${app.port}/v4/proj/app/x`, 'http://evil.example/v4/proj/app/x', '*']) {
    const x = await exchange(h.sidecar.port, `GET ${target} HTTP/1.1\r\nHost: sidecar.test\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)
    t.equal(x.responses[0]?.status, 404, target)
    t.equal(x.responses[0]?.text, '{"message":"no such route"}', target)
  }
  const connectCall = await exchange(h.sidecar.port, `CONNECT 127.0.0.1:${app.port} HTTP/1.1\r\nHost: 127.0.0.1:${app.port}\r\nAuthorization: Bearer ${token}\r\n\r\n`)
  t.ok(connectCall.closed, 'CONNECT: the connection is closed')
  t.equal(connectCall.bytes.length, 0, 'without a tunnel or an answer')
  t.same(seen.slice(before), [])
})

t.test('an h2c upgrade is not a way around auth, and is never forwarded', async t => {
  const before = seen.length
  const upgrade = 'Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n'
  const anonymous = await exchange(h.sidecar.port, `GET /v4/proj/app/h2c HTTP/1.1\r\nHost: sidecar.test\r\n${upgrade}`)
  t.equal(anonymous.responses[0]?.status, 401)
  t.equal(anonymous.responses[0]?.text, '{"message":"missing bearer token"}')
  t.ok(anonymous.closed)
  const authorised = await exchange(h.sidecar.port, head('GET', '/h2c', upgrade))
  t.ok(authorised.closed, 'a non-WebSocket upgrade is cut')
  t.equal(authorised.bytes.length, 0, 'no 101, nothing tunnelled')
  t.same(seen.slice(before), [])
})

t.test('an error half-way through a request body never writes into a response already under way', async t => {
  // an app that starts streaming its answer before the request body has ended
  const streaming = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('first part|')
    req.resume()
  })
  await new Promise<void>(resolve => streaming.listen(0, '127.0.0.1', resolve))
  const custom = await startHarness(`http://127.0.0.1:${(streaming.address() as AddressInfo).port}`, { RUNTIME: 'custom' })
  t.teardown(async () => {
    await custom.close()
    streaming.closeAllConnections()
    await new Promise(resolve => streaming.close(resolve))
  })
  const customToken = await custom.token('proj')
  const x = await exchange(custom.sidecar.port, [
    `POST /v4/proj/app/stream HTTP/1.1\r\nHost: sidecar.test\r\nAuthorization: Bearer ${customToken}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n`,
    'zz\r\nnot a chunk\r\n'
  ], { gapMs: 300 })
  t.ok(x.closed, 'the connection is cut')
  const text = x.bytes.toString('latin1')
  t.match(text, /^HTTP\/1\.1 200 OK\r\n/)
  t.equal(text.indexOf('HTTP/1.1', 1), -1, 'no second status line inside the streamed body')
  t.match(text, /\r\n\r\nb\r\nfirst part\|\r\n$/, 'the bytes end where the app had got to')
})

t.test('after all of it: no smuggled request ever reached the app, and the sidecar still serves', async t => {
  t.same(seen.filter(url => url.includes('smuggled')), [])
  t.ok(await livez(h))
  const x = await exchange(h.sidecar.port, head('GET', '/still-here', 'Connection: close\r\n\r\n'))
  t.equal(x.responses[0]?.status, 200)
})
