import { createServer, maxHeaderSize } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { type Harness, startHarness, type TestServer } from '../helpers/sidecar-harness.ts'
import { send } from '../helpers/http-client.ts'
import { patient } from '../helpers/timing.ts'
import { type Exchange, exchange, livez , startTargetEchoApp } from './hostile-kit.ts'

// Headers are bounded by Node's max header size (16 KiB unless --max-http-header-size says
// otherwise): past it the parser stops and the caller gets a JSON 431 and a closed connection,
// having been read no further. Nothing of such a request reaches the app or the token verifier.

const MiB = 1024 * 1024
const TOO_LARGE = '{"message":"request headers too large"}'

let app: TestServer
let h: Harness
let token: string
const seen: string[] = []

t.before(async () => {
  app = await startTargetEchoApp(seen)
  h = await startHarness(app.url)
  token = await h.token('proj')
})
t.teardown(async () => {
  await h.close()
  await app.close()
})

/** The bytes of `total` in 64 KiB parts, so the writer can stop once the sidecar has answered. */
function parts (prefix: string, filler: (size: number) => string, total: number, suffix: string): string[] {
  const out = [prefix]
  for (let written = 0; written < total; written += 64 * 1024) out.push(filler(Math.min(64 * 1024, total - written)))
  out.push(suffix)
  return out
}

function assert431 (t: Test, x: Exchange, label: string): void {
  t.equal(x.malformed, undefined, `${label}: a well-formed response`)
  t.equal(x.responses.length, 1, `${label}: one answer`)
  t.equal(x.responses[0]?.status, 431, label)
  t.equal(x.responses[0]?.reason, 'Request Header Fields Too Large', label)
  t.equal(x.responses[0]?.headers['content-type'], 'application/json; charset=utf-8', label)
  t.equal(x.responses[0]?.text, TOO_LARGE, label)
  t.ok(x.closed, `${label}: the connection is closed`)
  t.notOk(x.timedOut, label)
}

t.test('the limit in force is Node\'s default of 16 KiB', async t => {
  t.equal(maxHeaderSize, 16 * 1024)
})

t.test('one 1 MiB header: 431 after the first 16 KiB, never forwarded', async t => {
  const before = seen.length
  const x = await exchange(h.sidecar.port, parts(`GET /v4/proj/app/big HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ${token}\r\nX-Big: `,
    size => 'a'.repeat(size), MiB, '\r\n\r\n'), { stopWhenAnswered: true })
  assert431(t, x, 'one huge header')
  t.same(seen.slice(before), [])
})

t.test('1 MiB made of 20,000 small headers: 431, never forwarded', async t => {
  const before = seen.length
  const line = 'X-Many-Headers-1234567890: abcdefghijklmnopqrstuv\r\n' // 52 bytes
  const x = await exchange(h.sidecar.port, parts(`GET /v4/proj/app/many HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ${token}\r\n`,
    size => line.repeat(Math.floor(size / line.length)), 20_000 * line.length, '\r\n'), { stopWhenAnswered: true })
  assert431(t, x, 'many headers')
  t.same(seen.slice(before), [])
})

t.test('a 1 MiB request target: 431, never forwarded', async t => {
  const before = seen.length
  const x = await exchange(h.sidecar.port, parts('GET /v4/proj/app/', size => 'p'.repeat(size), MiB,
    ` HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ${token}\r\n\r\n`), { stopWhenAnswered: true })
  assert431(t, x, 'huge target')
  t.same(seen.slice(before), [])
})

t.test('a 1 MiB bearer token is refused by the parser, long before any signature check', async t => {
  const before = seen.length
  const x = await exchange(h.sidecar.port, parts('GET /v4/proj/app/token HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ',
    size => 'A'.repeat(size), MiB, '\r\n\r\n'), { stopWhenAnswered: true, ms: patient(3000) })
  // the parser's 431 is the proof; the time only excludes a hang, so a loaded machine gets PATIENCE times it
  assert431(t, x, 'huge token')
  t.ok(x.elapsedMs < patient(2000), `answered in ${x.elapsedMs} ms`)
  t.same(seen.slice(before), [])
  t.notOk(h.logs.some(line => JSON.stringify(line).includes('A'.repeat(64))), 'no log line holds the token')
})

t.test('the same over one write: the sidecar answers without waiting for the end', async t => {
  const before = seen.length
  const x = await exchange(h.sidecar.port, `GET /v4/proj/app/oneshot HTTP/1.1\r\nHost: s\r\nX-Big: ${'b'.repeat(MiB)}\r\n\r\n`)
  // the sidecar stops reading at the limit: the caller may see the 431 or, when its unread bytes
  // made the kernel reset the connection first, only the reset; never anything else
  t.ok(x.closed)
  if (x.responses.length > 0) assert431(t, x, 'one write')
  else t.equal(x.bytes.length, 0, `reset before the answer was read (${x.error ?? 'closed'})`)
  t.same(seen.slice(before), [])
})

t.test('past 2000 headers (under 16 KiB) the rest are ignored: a token hidden there does not count', async t => {
  const before = seen.length
  const filler = Array.from({ length: 2100 }, (_, i) => `a${i % 10}:b\r\n`).join('')
  const x = await exchange(h.sidecar.port, `GET /v4/proj/app/count HTTP/1.1\r\nHost: s\r\n${filler}Authorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)
  t.equal(x.malformed, undefined)
  // Node 20 ignores the headers past its count (so the token is missing); Node 24 refuses the whole request (431)
  const expected = x.responses[0]?.status === 431
    ? { status: 431, text: '{"message":"request headers too large"}' }
    : { status: 401, text: '{"message":"missing bearer token"}' }
  t.same({ status: x.responses[0]?.status, text: x.responses[0]?.text }, expected)
  t.same(seen.slice(before), [])
})

t.test('headers just under the limit still pass, whole, to the app', async t => {
  const before = seen.length
  const value = 'v'.repeat(12 * 1024)
  const r = await send(`${h.base}/v4/proj/app/under`, { headers: { authorization: `Bearer ${token}`, 'x-large': value } })
  t.equal(r.status, 200)
  t.same(seen.slice(before), ['/under'])
  t.equal(app.requests[app.requests.length - 1]?.headers['x-large'], value)
})

t.test('an app answering with oversized headers gets the caller a 502, not a crash', async t => {
  const hostile = createServer((_req, res) => {
    res.writeHead(200, { 'x-huge': 'h'.repeat(100 * 1024), 'content-type': 'text/plain' }).end('ok')
  })
  await new Promise<void>(resolve => hostile.listen(0, '127.0.0.1', resolve))
  const other = await startHarness(`http://127.0.0.1:${(hostile.address() as AddressInfo).port}`)
  t.teardown(async () => {
    await other.close()
    hostile.closeAllConnections()
    await new Promise(resolve => hostile.close(resolve))
  })
  const r = await send(`${other.base}/v4/proj/app/x`, { headers: { authorization: `Bearer ${await other.token('proj')}` } })
  t.equal(r.status, 502)
  t.match(r.json(), { message: /^app unreachable: / })
  t.ok(await livez(other))
})

t.test('afterwards the sidecar is alive and serving', async t => {
  t.ok(await livez(h))
  const r = await send(`${h.base}/v4/proj/app/after`, { headers: { authorization: `Bearer ${token}` } })
  t.equal(r.status, 200)
})
