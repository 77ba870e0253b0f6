import { strict as assert } from 'node:assert'
import fc from 'fast-check'
import t from 'tap'
import { eventually, type Harness, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { exchange, type Exchange, livez, messageOf, type RawResponse, UUID , startTargetEchoApp } from './hostile-kit.ts'

// Property-based fuzzing of the running sidecar over raw sockets: request targets, headers, query
// strings and webhookEndpoint values. Every input must get exactly one well-formed HTTP response
// with the status an independent oracle predicts (the app's 200 only for a legitimately valid
// call, else the sidecar's own JSON error), the connection closed as asked, the app must see
// exactly the calls that were valid (and exactly what they should forward), and the sidecar must
// still be alive afterwards. Runs are bounded and seeded: a failure prints its seed and path, and
// FUZZ_SEED=<seed> reruns it.

const SEED = Number(process.env.FUZZ_SEED ?? 20_261_121)
const RUNS = Number(process.env.FUZZ_RUNS ?? 400)
const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/
const RUN_ID = /^[A-Za-z0-9_-]{1,128}$/
const TCHAR = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/

let app: TestServer
let receiver: TestServer
let h: Harness
let token: string
/** Request targets in the order the app saw them. */
const seen: string[] = []

t.before(async () => {
  app = await startTargetEchoApp(seen)
  receiver = await startTestServer((_req, res) => { res.writeHead(204).end() })
  h = await startHarness(app.url, { PROJECT_ID: 'proj', APP_NAME: 'app', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_ATTEMPTS: '1' })
  token = await h.token('proj')
})
t.teardown(async () => {
  await h.close()
  await app.close()
  await receiver.close()
})

const params = { seed: SEED, numRuns: RUNS, endOnFailure: true }
t.comment(`fast-check seed ${SEED}, ${RUNS} runs per property (FUZZ_SEED / FUZZ_RUNS to change)`)

// ---------------------------------------------------------------------------------------------
// oracles

/** The sidecar's own answer: exactly one response with `status` and a `{"message"}` body, then a close. */
function expectOwnError (x: Exchange, status: number, message?: string | RegExp, fromStore = false): RawResponse {
  const response = expectOneResponse(x)
  assert.equal(response.status, status, `status ${response.status}, wanted ${status}: ${response.text}`)
  // a /v2 answer is the store's, passed on unchanged
  if (!fromStore) assert.equal(response.headers['content-type'], 'application/json; charset=utf-8')
  const text = messageOf(response)
  if (typeof message === 'string') assert.equal(text, message)
  else if (message !== undefined) assert.match(text, message)
  return response
}

function expectOneResponse (x: Exchange): RawResponse {
  assert.equal(x.malformed, undefined, `not well-formed HTTP: ${x.malformed ?? ''}`)
  assert.equal(x.timedOut, false, 'the sidecar did not answer in time')
  assert.equal(x.responses.length, 1, `${x.responses.length} responses in ${JSON.stringify(x.bytes.toString('latin1').slice(0, 300))}`)
  assert.equal(x.rest.length, 0, 'bytes after the response')
  assert.ok(x.closed, 'the connection was not closed after Connection: close')
  return x.responses[0] as RawResponse
}

/** The app's answer, wrapped: the app saw exactly `forwarded`, once. */
function expectForwarded (x: Exchange, seenBefore: number, forwarded: string): RawResponse {
  const response = expectOneResponse(x)
  assert.equal(response.status, 200, `status ${response.status}: ${response.text}`)
  const envelope = JSON.parse(response.text) as { run_id: string, result: { url: string } }
  assert.equal(envelope.result.url, forwarded)
  assert.equal(response.headers['x-request-id'], envelope.run_id)
  assert.deepEqual(seen.slice(seenBefore), [forwarded])
  return response
}

function decodeComponent (text: string): string {
  const spaced = text.replaceAll('+', ' ')
  try { return decodeURIComponent(spaced) } catch { return spaced }
}

/** A query split as docs/routes.md, "Webhooks" says: the first `webhookEndpoint` (decoded), and the query forwarded without any of them. */
function splitOracle (query: string): { endpoint: string | undefined, forwarded: string } {
  if (query === '') return { endpoint: undefined, forwarded: '' }
  let endpoint: string | undefined
  const kept: string[] = []
  for (const pair of query.split('&')) {
    const eq = pair.indexOf('=')
    if (decodeComponent(eq === -1 ? pair : pair.slice(0, eq)) === 'webhookEndpoint') {
      endpoint ??= decodeComponent(eq === -1 ? '' : pair.slice(eq + 1))
    } else {
      kept.push(pair)
    }
  }
  return { endpoint, forwarded: kept.join('&') }
}

/** The webhookEndpoint rule of docs/routes.md, "Webhooks": absolute http(s), a host, no user-info, at most 2048 characters. Undefined when valid. */
function endpointError (raw: string): string | undefined {
  if (raw.length > 2048) return 'webhookEndpoint is longer than 2048 characters'
  let url: URL
  try { url = new URL(raw) } catch { return 'webhookEndpoint must be an absolute http or https URL' }
  if (!['http:', 'https:'].includes(url.protocol) || url.hostname === '') return 'webhookEndpoint must be an absolute http or https URL'
  if (url.username !== '' || url.password !== '' || /^[a-z]+:\/\/[^/?#]*@/i.test(raw)) return 'webhookEndpoint must not carry user-info'
  return undefined
}

// ---------------------------------------------------------------------------------------------
// 1. request targets

const bytesOf = (text: string): number[] => [...Buffer.from(text, 'latin1')]
const notCrLf = fc.integer({ min: 0, max: 255 }).filter(b => b !== 0x0d && b !== 0x0a)
const pieces = fc.oneof(
  { weight: 6, arbitrary: fc.stringMatching(/^[A-Za-z0-9._-]{1,6}$/).map(bytesOf) },
  {
    weight: 6,
    arbitrary: fc.constantFrom('/', '/', '.', '..', '%', '%2F', '%2f', '%5F', '%5f', '_', '%00', '%FF', '%E2%82', '?', '&', '=', '#', '+', ';', '@', ':', '~', '//',
      '\\', '"', '<', '>', '{', '|', '^', '`', '[', ']', 'webhookEndpoint=', 'access_token=', 'proj', 'app', 'v4').map(bytesOf)
  },
  // one byte the parser refuses in a target: controls, space, DEL, anything >= 0x80
  { weight: 1, arbitrary: notCrLf.filter(b => b < 0x21 || b > 0x7e).map(b => [b]) }
)
const tail = fc.array(pieces, { maxLength: 6 }).map(list => list.flat())
const target = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.tuple(fc.constantFrom('/v4/proj/app', '/v4/proj/app/', '/v4/proj/app/', '/v4/proj/app/', '/v4/proj/app/', '/v4/proj/', '/v4/',
      '/v4//app/', '/v4/other/app/', '/v4/proj/other/', '/v4/PROJ/app/', '/v4/.proj/app/', '/v4/proj/app.', '/v4/proj%2Fapp/', '/v2/', '/v2', '/', '/v4'), tail)
      .map(([prefix, rest]) => Buffer.from([...bytesOf(prefix), ...rest]))
  },
  { weight: 1, arbitrary: fc.array(notCrLf, { maxLength: 40 }).map(list => Buffer.from(list)) }
)
const method = fc.constantFrom('GET', 'GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS')

type TargetOutcome = { kind: 'malformed' } | { kind: 'not-route' } | { kind: 'store', method: string } | { kind: 'no-app' } |
{ kind: 'bad-webhook', message: string } | { kind: 'forward', url: string } | { kind: 'unsure' } | { kind: 'reserved' }

function targetOracle (sent: Buffer, verb: string): TargetOutcome {
  // the parser tolerates extra spaces around the target (the target itself stays unambiguous)
  const text = sent.toString('latin1').replace(/^ +| +$/g, '')
  if (text === '' || /[^\x21-\x7e]/.test(text)) return { kind: 'malformed' }
  if (!text.startsWith('/')) return { kind: 'unsure' } // the parser's choice (400) or no route (404)
  if (text.startsWith('/v2/') || text === '/v2' || text.startsWith('/v2?')) return { kind: 'store', method: verb }
  if (!text.startsWith('/v4/')) return { kind: 'not-route' }
  const queryAt = text.indexOf('?')
  const path = queryAt === -1 ? text : text.slice(0, queryAt)
  const query = queryAt === -1 ? '' : text.slice(queryAt + 1)
  const segments = path.slice(4).split('/')
  if (segments.length < 2) return { kind: 'no-app' }
  const [projectId, appName] = segments as [string, string]
  if (!ID.test(projectId) || !ID.test(appName) || projectId !== 'proj' || appName !== 'app') return { kind: 'no-app' }
  const appPath = segments.length === 2 ? '/' : '/' + segments.slice(2).join('/')
  // the sidecar's own paths, read as %5F/%5f and empty segments decode and normalise to: _runs routes, else 404
  if (appPath.replace(/%5f/gi, '_').replace(/\/{2,}/g, '/').startsWith('/_')) return { kind: 'reserved' }
  const { endpoint, forwarded } = splitOracle(query)
  if (endpoint !== undefined) {
    const message = endpointError(endpoint)
    if (message !== undefined) return { kind: 'bad-webhook', message }
    throw new Error(`the generator made a valid webhookEndpoint ${endpoint}; this property must not send webhooks`)
  }
  return { kind: 'forward', url: appPath + (forwarded === '' ? '' : '?' + forwarded) }
}

t.test('request targets: the right status for every path and query, and the app sees exactly the valid calls', async t => {
  const tally: Record<string, number> = {}
  await fc.assert(fc.asyncProperty(target, method, async (bytes, verb) => {
    const before = seen.length
    const outcome = targetOracle(bytes, verb)
    const x = await exchange(h.sidecar.port, Buffer.concat([Buffer.from(`${verb} `), bytes,
      Buffer.from(` HTTP/1.1\r\nHost: fuzz.test\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)]))
    tally[outcome.kind] = (tally[outcome.kind] ?? 0) + 1
    switch (outcome.kind) {
      case 'malformed': expectOwnError(x, 400, 'malformed request'); break
      case 'not-route': expectOwnError(x, 404, 'no such route'); break
      case 'no-app': expectOwnError(x, 404, 'no such app'); break
      case 'store': // forwarded to the store (a stand-in that knows no /v2 route), or refused for a write
        if (outcome.method === 'GET') expectOwnError(x, 404, 'not found', true)
        else expectOwnError(x, 405, 'method not allowed')
        break
      case 'bad-webhook': expectOwnError(x, 400, outcome.message); break
      case 'unsure': {
        const response = expectOneResponse(x)
        assert.ok(response.status === 400 || response.status === 404, `status ${response.status}`)
        messageOf(response)
        break
      }
      case 'reserved': {
        // 404 no such route / no such run, 400 a malformed run id, 405 a method the route does not take
        const response = expectOneResponse(x)
        assert.ok([400, 404, 405].includes(response.status), `status ${response.status}`)
        messageOf(response)
        break
      }
      case 'forward': expectForwarded(x, before, outcome.url); break
    }
    if (outcome.kind !== 'forward') assert.deepEqual(seen.slice(before), [], 'a refused call reached the app')
  }), params)
  t.comment(JSON.stringify(tally))
  t.ok((tally.forward ?? 0) > RUNS / 10, `${tally.forward ?? 0} valid calls forwarded`)
  t.ok((tally.malformed ?? 0) > RUNS / 20, `${tally.malformed ?? 0} unparsable targets refused`)
  t.ok((tally['no-app'] ?? 0) > RUNS / 20, `${tally['no-app'] ?? 0} other projects/apps refused`)
  t.ok(await livez(h), 'the sidecar is alive')
})

// ---------------------------------------------------------------------------------------------
// 2. headers

const DROPPED = ['Keep-Alive', 'Proxy-Connection', 'Proxy-Authorization', 'TE', 'Trailer', 'X-Webhook-Secret']
const headerName = fc.oneof(
  { weight: 8, arbitrary: fc.stringMatching(/^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,10}$/).map(name => `X-Fz-${name}`) },
  { weight: 2, arbitrary: fc.constantFrom(...DROPPED, 'Connection', 'X-Request-Id', 'x-request-id') },
  { weight: 1, arbitrary: fc.array(notCrLf.filter(b => b !== 0x3a), { minLength: 1, maxLength: 5 }).map(list => Buffer.from(list).toString('latin1')) }
)
const headerValue = fc.oneof(
  { weight: 6, arbitrary: fc.stringMatching(/^[\t\x20-\x7e]{0,24}$/) },
  { weight: 2, arbitrary: fc.stringMatching(/^[A-Za-z0-9_-]{1,130}$/) },
  { weight: 2, arbitrary: fc.array(fc.integer({ min: 0x80, max: 0xff }), { minLength: 1, maxLength: 8 }).map(list => Buffer.from(list).toString('latin1')) },
  { weight: 1, arbitrary: fc.array(notCrLf, { maxLength: 8 }).map(list => Buffer.from(list).toString('latin1')) }
)
const headerList = fc.array(fc.tuple(headerName, headerValue), { minLength: 1, maxLength: 8 })

const trimOws = (value: string): string => value.replace(/^[\t ]+|[\t ]+$/g, '')
const validValue = (value: string): boolean => [...Buffer.from(value, 'latin1')].every(b => b === 0x09 || (b >= 0x20 && b <= 0x7e) || b >= 0x80)

t.test('headers: invalid names and values are 400; valid ones reach the app intact, minus hop-by-hop and secret ones', async t => {
  const tally = { refused: 0, forwarded: 0, keptRunIds: 0, secrets: [] as string[] }
  await fc.assert(fc.asyncProperty(headerList, async headers => {
    const before = seen.length
    const lines = headers.map(([name, value]) => `${name}: ${value}\r\n`).join('')
    const x = await exchange(h.sidecar.port, Buffer.from(`GET /v4/proj/app/headers HTTP/1.1\r\nHost: fuzz.test\r\nAuthorization: Bearer ${token}\r\n${lines}Connection: close\r\n\r\n`, 'latin1'))
    if (headers.some(([name, value]) => !TCHAR.test(name) || !validValue(value))) {
      tally.refused++
      expectOwnError(x, 400, 'malformed request')
      assert.deepEqual(seen.slice(before), [])
      return
    }
    tally.forwarded++
    const response = expectForwarded(x, before, '/headers')
    const forwarded = app.requests[app.requests.length - 1] as TestServer['requests'][number]
    // the run id: the caller's when it is one well-formed value, else a new UUID; the same at the app
    const ids = headers.filter(([name]) => name.toLowerCase() === 'x-request-id').map(([, value]) => trimOws(value))
    const callerId = ids.length === 0 ? undefined : ids.join(', ')
    if (callerId !== undefined && RUN_ID.test(callerId)) {
      tally.keptRunIds++
      assert.equal(response.headers['x-request-id'], callerId)
    } else {
      assert.match(response.headers['x-request-id'] as string, UUID)
    }
    assert.equal(forwarded.headers['x-request-id'], response.headers['x-request-id'])
    // hop-by-hop and secret headers never reach the app; Connection names more of them
    const connection = [...headers.filter(([name]) => name === 'Connection').map(([, value]) => trimOws(value)), 'close'].join(', ').toLowerCase()
    const named = ['keep-alive', 'close', 'upgrade'].includes(connection) ? new Set<string>() : new Set(connection.split(',').map(token => token.trim()))
    const appNames = forwarded.rawHeaders.filter((_, i) => i % 2 === 0).map(name => name.toLowerCase())
    for (const name of DROPPED) assert.ok(!appNames.includes(name.toLowerCase()), `${name} reached the app`)
    assert.equal(forwarded.headers.connection, 'keep-alive', 'the app sees the sidecar\'s own connection')
    for (const [name, value] of headers) if (name === 'X-Webhook-Secret' && trimOws(value).length >= 6) tally.secrets.push(trimOws(value))
    // every other header arrives, in order, with its value as sent (optional whitespace aside)
    const sent = headers.filter(([name]) => name.startsWith('X-Fz-') && !named.has(name.toLowerCase())).map(([name, value]) => [name.toLowerCase(), trimOws(value)])
    const received: string[][] = []
    for (let i = 0; i < forwarded.rawHeaders.length; i += 2) {
      const name = (forwarded.rawHeaders[i] as string).toLowerCase()
      if (name.startsWith('x-fz-')) received.push([name, forwarded.rawHeaders[i + 1] as string])
    }
    assert.deepEqual(received, sent)
  }), params)
  t.comment(JSON.stringify({ ...tally, secrets: tally.secrets.length }))
  t.ok(tally.refused > RUNS / 20, `${tally.refused} refused`)
  t.ok(tally.forwarded > RUNS / 3, `${tally.forwarded} forwarded`)
  t.ok(tally.keptRunIds > 0, `${tally.keptRunIds} caller run ids kept`)
  const logged = h.logs.map(line => JSON.stringify(line)).join('\n')
  t.same(tally.secrets.filter(secret => logged.includes(JSON.stringify(secret).slice(1, -1))), [], 'no X-Webhook-Secret value in any log line')
  t.ok(await livez(h), 'the sidecar is alive')
})

// ---------------------------------------------------------------------------------------------
// 3. query strings and webhookEndpoint

/** Hosts that are valid but refused by the address guard at once (no connection, no DNS). */
const REFUSED_HOSTS = ['10.0.0.1', '192.168.1.1', '169.254.169.254', '[::1]', '[fe80::1]', '0.0.0.0', '100.64.0.1', '224.0.0.1',
  '[::ffff:10.0.0.1]', '0x0a000001', '[fc00::1]', '[2002:7f00:1::]', '[64:ff9b::a00:1]', '255.255.255.255']
/** Spellings of 127.0.0.1 (allowed here by WEBHOOK_ALLOWED_CIDRS), where the receiver listens. */
const RECEIVER_HOSTS = ['127.0.0.1', '127.1', '2130706433', '0x7f000001', '0177.0.0.1']
const urlPart = fc.stringMatching(/^[A-Za-z0-9._~!$&'()*+,;=:@%-]{0,12}$/)

const endpoint = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.tuple(fc.constantFrom('http', 'HTTP', 'Http'), fc.constantFrom(...RECEIVER_HOSTS), urlPart, urlPart, urlPart)
      .map(([scheme, host, path, query, fragment]) => `${scheme}://${host}:${receiver.port}/${path}${query === '' ? '' : '?' + query}${fragment === '' ? '' : '#' + fragment}`)
  },
  {
    weight: 2,
    arbitrary: fc.tuple(fc.constantFrom('http', 'https'), fc.constantFrom(...REFUSED_HOSTS), fc.integer({ min: 1, max: 65535 }), urlPart)
      .map(([scheme, host, port, path]) => `${scheme}://${host}:${port}/${path}`)
  },
  {
    weight: 4,
    arbitrary: fc.oneof(
      fc.constantFrom('', 'ftp://127.0.0.1/x', 'file:///etc/passwd', 'javascript:alert(1)', 'ws://127.0.0.1/', 'data:text/plain,x',
        'gopher://127.0.0.1:11211/_stats', '/just/a/path', '//127.0.0.1/x', '127.0.0.1:8080/x', 'http://', 'https://:80/', 'http://[::1/', 'http://a b/'),
      fc.tuple(fc.constantFrom('user', 'u:p', ':p', 'admin:hunter2', 'a%40b'), fc.constantFrom(...RECEIVER_HOSTS, ...REFUSED_HOSTS))
        .map(([info, host]) => `http://${info}@${host}/`),
      fc.integer({ min: 2040, max: 2060 }).map(length => {
        const prefix = `http://127.0.0.1:${receiver.port}/`
        return prefix + 'a'.repeat(length - prefix.length)
      }),
      fc.string({ maxLength: 30 }).filter(text => !text.includes(':'))
    )
  }
)
const encodings = fc.constantFrom<'component' | 'raw' | 'plus'>('component', 'component', 'raw', 'plus')
const encode = (value: string, how: 'component' | 'raw' | 'plus'): string =>
  how === 'component' ? encodeURIComponent(value) : how === 'plus' ? encodeURIComponent(value).replaceAll('%20', '+') : value.replaceAll('&', '%26').replaceAll('#', '%23').replace(/[^\x21-\x7e]/g, c => encodeURIComponent(c))
const pair = fc.oneof(
  { weight: 3, arbitrary: fc.tuple(fc.constantFrom('webhookEndpoint', 'webhook%45ndpoint', '%77ebhookEndpoint', 'webhookendpoint', 'webhookEndpoint%00'), endpoint, encodings).map(([name, value, how]) => `${name}=${encode(value, how)}`) },
  { weight: 3, arbitrary: fc.tuple(fc.constantFrom('a', 'access_token', 'q', 'x%20y', 'x+y', '%FF', 'webhook'), fc.string({ maxLength: 12 })).map(([name, value]) => `${name}=${encodeURIComponent(value)}`) },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z0-9=%+._~-]{0,10}$/) }
)
const query = fc.array(pair, { maxLength: 5 }).map(pairs => pairs.join('&'))

t.test('query strings and webhookEndpoint: 400 for a bad endpoint, else the call is forwarded without it and its webhook goes out', async t => {
  const expected = { delivered: new Map<string, string>(), refused: new Set<string>(), badWebhook: 0, noWebhook: 0 }
  const receiverBefore = receiver.requests.length
  await fc.assert(fc.asyncProperty(query, async q => {
    const before = seen.length
    const x = await exchange(h.sidecar.port, `POST /v4/proj/app/q?${q} HTTP/1.1\r\nHost: fuzz.test\r\nAuthorization: Bearer ${token}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`)
    const { endpoint: raw, forwarded } = splitOracle(q)
    const message = raw === undefined ? undefined : endpointError(raw)
    if (message !== undefined) {
      expected.badWebhook++
      expectOwnError(x, 400, message)
      assert.deepEqual(seen.slice(before), [], 'a call with a bad webhookEndpoint reached the app')
      return
    }
    const response = expectForwarded(x, before, '/q' + (forwarded === '' ? '' : '?' + forwarded))
    const runId = response.headers['x-request-id'] as string
    if (raw === undefined) {
      expected.noWebhook++
      return
    }
    const url = new URL(raw)
    if (url.hostname === '127.0.0.1') expected.delivered.set(runId, url.pathname + url.search)
    else expected.refused.add(runId)
  }), params)
  t.comment(JSON.stringify({ delivered: expected.delivered.size, refused: expected.refused.size, badWebhook: expected.badWebhook, noWebhook: expected.noWebhook }))
  t.ok(expected.delivered.size > RUNS / 20, `${expected.delivered.size} webhooks to the receiver`)
  t.ok(expected.refused.size > RUNS / 40, `${expected.refused.size} webhooks to refused addresses`)
  t.ok(expected.badWebhook > RUNS / 10, `${expected.badWebhook} bad endpoints refused`)
  // every valid endpoint got exactly its one webhook: delivered to the receiver, or refused at once
  await eventually(() => receiver.requests.length - receiverBefore >= expected.delivered.size &&
    h.logs.filter(line => line.msg === 'webhook failed').length >= expected.refused.size, 10_000)
  const deliveries = receiver.requests.slice(receiverBefore)
  t.equal(deliveries.length, expected.delivered.size, 'one delivery per webhook to the receiver')
  t.same(new Map(deliveries.map(d => [d.headers['x-request-id'] as string, d.url])), expected.delivered, 'each to its own run id and path')
  const failures = h.logs.filter(line => line.msg === 'webhook failed')
  t.equal(failures.length, expected.refused.size, 'one failure per refused destination')
  t.ok(failures.every(line => line.outcome === 'address refused' && line.attempts === 1 && expected.refused.has(line.runId as string)),
    'each refused at once, without a retry')
  t.ok(await livez(h), 'the sidecar is alive')
})
