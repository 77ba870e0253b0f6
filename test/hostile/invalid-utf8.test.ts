import type { IncomingMessage } from 'node:http'
import t from 'tap'
import { eventually, type Harness, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { send } from '../helpers/http-client.ts'
import { exchange, livez, MALFORMED, messageOf, rawGet, UUID } from './hostile-kit.ts'

// Invalid UTF-8 wherever a caller or an app can put bytes. Raw bytes >= 0x80 are not allowed in a
// request target (the parser answers 400); percent-encoded ones pass as written; header values
// are opaque bytes (passed on unchanged, never used as a run id); bodies are the app's business.
// Whatever the app answers, the cortex envelope and the webhook body stay valid UTF-8 JSON.

const INVALID = [
  Buffer.from([0xff, 0xfe]), // never valid
  Buffer.from([0xc3, 0x28]), // a lead byte without its continuation
  Buffer.from([0xc0, 0xaf]), // an overlong '/'
  Buffer.from([0xed, 0xa0, 0x80]), // a UTF-16 surrogate encoded as UTF-8
  Buffer.from([0xf4, 0x90, 0x80, 0x80]), // beyond U+10FFFF
  Buffer.from([0xe2, 0x82]) // cut short
]
const percent = (bytes: Buffer): string => [...bytes].map(b => `%${b.toString(16).toUpperCase().padStart(2, '0')}`).join('')
const strictUtf8 = new TextDecoder('utf-8', { fatal: true })

/** App bodies by path: each 2xx answer carries invalid UTF-8 in a different way. */
const APP_BODIES: Record<string, { type: string, body: Buffer }> = {
  '/bytes': { type: 'application/octet-stream', body: Buffer.concat([Buffer.from('raw '), ...INVALID]) },
  '/json-string': { type: 'application/json', body: Buffer.concat([Buffer.from('{"text":"'), Buffer.from([0xff, 0xc3, 0x28]), Buffer.from('"}')]) },
  '/json-escape': { type: 'application/json', body: Buffer.from('{"lone":"\\ud800","pair":"\\ud83d\\ude00"}') },
  '/truncated': { type: 'text/plain', body: Buffer.concat([Buffer.from('ok '), Buffer.from([0xe2, 0x82])]) }
}

let app: TestServer
let h: Harness
let custom: Harness
let receiver: TestServer
let token: string
const seen: string[] = []

t.before(async () => {
  app = await startTestServer((req, res, body) => {
    const path = (req.url as string).split('?')[0] as string
    const canned = APP_BODIES[path]
    if (canned !== undefined) {
      res.writeHead(200, { 'content-type': canned.type }).end(canned.body)
    } else if (path === '/ndjson') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' })
      res.end(Buffer.concat([Buffer.from('{"n":1}\n'), Buffer.from([0xff, 0x0a]), Buffer.from('{"s":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}\n')]))
    } else {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ url: req.url, length: body.length }))
    }
  })
  app.server.on('request', (req: IncomingMessage) => { seen.push(req.url as string) })
  receiver = await startTestServer((_req, res) => { res.writeHead(204).end() })
  h = await startHarness(app.url, { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_ATTEMPTS: '1' })
  custom = await startHarness(app.url, { RUNTIME: 'custom' })
  token = await h.token('proj')
})
t.teardown(async () => {
  await h.close()
  await custom.close()
  await app.close()
  await receiver.close()
})

t.test('raw invalid UTF-8 in the request target is refused by the parser: 400, nothing forwarded', async t => {
  const before = seen.length
  for (const bytes of INVALID) {
    for (const target of [
      Buffer.concat([Buffer.from('/v4/proj/app/'), bytes]),
      Buffer.concat([Buffer.from('/v4/pr'), bytes, Buffer.from('oj/app/x')]),
      Buffer.concat([Buffer.from('/v4/proj/app/x?q='), bytes])
    ]) {
      const x = await exchange(h.sidecar.port, rawGet(target, token))
      t.equal(x.responses[0]?.status, 400, percent(target))
      t.equal(x.responses[0]?.text, MALFORMED)
      t.ok(x.closed)
    }
  }
  t.same(seen.slice(before), [])
})

t.test('percent-encoded invalid UTF-8 in the app path and query reaches the app exactly as written', async t => {
  for (const bytes of INVALID) {
    const target = `/v4/proj/app/p${percent(bytes)}?q=${percent(bytes)}&plus=a+b&bad=%zz%`
    const r = await send(`${h.base}${target}`, { headers: { authorization: `Bearer ${token}` } })
    t.equal(r.status, 200, target)
    t.equal(seen[seen.length - 1], target.slice('/v4/proj/app'.length), 'forwarded undecoded, byte for byte')
  }
})

t.test('percent-encoded invalid UTF-8 in an id is just a malformed id: 404', async t => {
  const before = seen.length
  const r = await send(`${h.base}/v4/pr${percent(Buffer.from([0xff]))}oj/app/x`, { headers: { authorization: `Bearer ${token}` } })
  t.equal(r.status, 404)
  t.equal(r.text, '{"message":"no such app"}')
  t.same(seen.slice(before), [])
})

t.test('invalid UTF-8 in header values passes to the app byte for byte; in a header name it is a 400', async t => {
  const value = Buffer.concat([Buffer.from('v '), ...INVALID, Buffer.from(' end')])
  const x = await exchange(h.sidecar.port, rawGet('/v4/proj/app/header', token, `X-Bytes: ${value.toString('latin1')}\r\n`))
  t.equal(x.responses[0]?.status, 200)
  const forwarded = app.requests[app.requests.length - 1]?.headers['x-bytes']
  t.ok(Buffer.from(forwarded as string, 'latin1').equals(value), 'same bytes at the app')
  const before = seen.length
  const badName = await exchange(h.sidecar.port, rawGet('/v4/proj/app/header', token, `X-\xff\xfe: v\r\n`))
  t.equal(badName.responses[0]?.status, 400)
  t.equal(badName.responses[0]?.text, MALFORMED)
  t.same(seen.slice(before), [])
})

t.test('an X-Request-Id with invalid UTF-8 is never reused: the run gets a fresh UUID', async t => {
  for (const bytes of INVALID) {
    const x = await exchange(h.sidecar.port, rawGet('/v4/proj/app/run-id', token, `X-Request-Id: abc${bytes.toString('latin1')}\r\n`))
    const answer = x.responses[0]
    t.equal(answer?.status, 200)
    t.match(answer?.headers['x-request-id'], UUID)
    const envelope = JSON.parse(answer?.text ?? '') as { run_id: string }
    t.equal(envelope.run_id, answer?.headers['x-request-id'])
    t.equal(app.requests[app.requests.length - 1]?.headers['x-request-id'], envelope.run_id, 'the app got the fresh id')
  }
  // and on the sidecar's own errors
  const refused = await exchange(h.sidecar.port, `GET /v4/proj/app/x HTTP/1.1\r\nHost: s\r\nX-Request-Id: \xff\xfe\r\nConnection: close\r\n\r\n`)
  t.equal(refused.responses[0]?.status, 401)
  t.match(refused.responses[0]?.headers['x-request-id'], UUID)
})

t.test('invalid UTF-8 in Authorization is a malformed token: 401, nothing forwarded', async t => {
  const before = seen.length
  const x = await exchange(h.sidecar.port, `GET /v4/proj/app/x HTTP/1.1\r\nHost: s\r\nAuthorization: Bearer ${token.slice(0, 20)}\xff\xfe${token.slice(20)}\r\nConnection: close\r\n\r\n`)
  t.equal(x.responses[0]?.status, 401)
  t.equal(messageOf(x.responses[0] as never), 'invalid token: Authorization must be "Bearer <token>"')
  t.same(seen.slice(before), [])
})

t.test('a JSON body with invalid UTF-8 is the app\'s business: forwarded byte for byte', async t => {
  const body = Buffer.concat([Buffer.from('{"name":"'), ...INVALID, Buffer.from('"}')])
  for (const sidecar of [h, custom]) {
    const r = await send(`${sidecar.base}/v4/proj/app/echo`, {
      method: 'POST', headers: { authorization: `Bearer ${await sidecar.token('proj')}`, 'content-type': 'application/json' }, body
    })
    t.equal(r.status, 200)
    t.ok(app.requests[app.requests.length - 1]?.body.equals(body), 'the app got the same bytes')
  }
})

t.test('cortex: whatever bytes the app answers, the envelope is valid UTF-8 JSON', async t => {
  for (const [path, { body }] of Object.entries(APP_BODIES)) {
    const r = await send(`${h.base}/v4/proj/app${path}`, { headers: { authorization: `Bearer ${token}` } })
    t.equal(r.status, 200, path)
    t.equal(r.headers['content-type'], 'application/json; charset=utf-8', path)
    t.equal(Number(r.headers['content-length']), r.body.length, path)
    t.doesNotThrow(() => strictUtf8.decode(r.body), `${path}: valid UTF-8`)
    const envelope = JSON.parse(strictUtf8.decode(r.body)) as { result: unknown }
    const text = body.toString('utf8') // invalid sequences read as U+FFFD
    let expected: unknown = text
    try { expected = JSON.parse(text) } catch {}
    t.same(envelope.result, expected, `${path}: result`)
  }
})

t.test('custom runtime: the app\'s invalid bytes pass through untouched', async t => {
  for (const [path, { body }] of Object.entries(APP_BODIES)) {
    const r = await send(`${custom.base}/v4/proj/app${path}`, { headers: { authorization: `Bearer ${await custom.token('proj')}` } })
    t.equal(r.status, 200)
    t.ok(r.body.equals(body), `${path}: same bytes`)
  }
})

t.test('an NDJSON stream with invalid UTF-8 lines becomes valid UTF-8 events', async t => {
  const r = await send(`${h.base}/v4/proj/app/ndjson`, { headers: { authorization: `Bearer ${token}` } })
  t.equal(r.status, 200)
  t.equal(r.headers['content-type'], 'text/event-stream; charset=utf-8')
  t.doesNotThrow(() => strictUtf8.decode(r.body))
  t.equal(r.text, `data: {"n":1}\n\ndata: \ufffd\n\ndata: {"s":"\ufffd("}\n\nid: ${r.headers['x-request-id'] as string}.done\n\n`)
})

t.test('the webhook of an answer with invalid UTF-8 is valid UTF-8 JSON too', async t => {
  const endpoint = encodeURIComponent(`${receiver.url}/hook`)
  const before = receiver.requests.length
  for (const path of Object.keys(APP_BODIES)) {
    const r = await send(`${h.base}/v4/proj/app${path}?webhookEndpoint=${endpoint}`, { headers: { authorization: `Bearer ${token}` } })
    t.equal(r.status, 200)
  }
  await eventually(() => receiver.requests.slice(before).filter(r => r.complete).length === Object.keys(APP_BODIES).length)
  t.equal(receiver.requests.length, before + Object.keys(APP_BODIES).length)
  for (const delivery of receiver.requests.slice(before)) {
    t.doesNotThrow(() => strictUtf8.decode(delivery.body))
    const parsed = JSON.parse(strictUtf8.decode(delivery.body)) as { status_code: number, result: unknown }
    t.equal(parsed.status_code, 200)
  }
})

t.test('an invalid UTF-8 percent sequence in webhookEndpoint is judged on the raw text', async t => {
  const before = seen.length
  // not decodable as UTF-8, so the value stays as written: an encoded URL is then no absolute URL
  const r = await send(`${h.base}/v4/proj/app/x?webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}%FF`, { headers: { authorization: `Bearer ${token}` } })
  t.equal(r.status, 400)
  t.equal(r.text, '{"message":"webhookEndpoint must be an absolute http or https URL"}')
  t.same(seen.slice(before), [])
})

t.test('after all of it the sidecar still serves', async t => {
  t.ok(await livez(h))
  t.ok(await livez(custom))
})
