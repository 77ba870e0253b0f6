import { randomBytes } from 'node:crypto'
import type { Socket } from 'node:net'
import t, { type Test } from 'tap'
import type { ClientOptions, WebSocket } from 'ws'
import { fetchMetrics, sampleValue } from '../../helpers/admin-metrics.ts'
import { eventually, type Harness, startHarness, freePort } from '../../helpers/sidecar-harness.ts'
import {
  type AppConnection, clientClosed, type ClientOutcome, connectClient, nextMessage, openRaw, rawHandshake, rawUpgrade,
  startWebSocketApp, type WebSocketApp, type WebSocketAppOptions
} from '../../helpers/websocket-app.ts'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

interface Setup {
  app: WebSocketApp
  h: Harness
  /** `ws://127.0.0.1:<sidecar port>/v4/proj/app<path>` */
  url: (path?: string, project?: string, appName?: string) => string
  /** Connects a client through the sidecar; it is terminated at teardown. */
  connect: (path?: string, protocols?: string[], options?: ClientOptions) => Promise<ClientOutcome>
  /** Connects and fails the test unless the upgrade succeeds. */
  open: (path?: string, protocols?: string[], options?: ClientOptions) => Promise<{ ws: WebSocket, outcome: ClientOutcome & { kind: 'open' }, app: AppConnection }>
  metrics: () => Promise<string>
}

/** A WebSocket app and a sidecar in front of it, both closed at teardown. */
async function setup (t: Test, env: Record<string, string> = {}, appOptions: WebSocketAppOptions = {}): Promise<Setup> {
  const app = await startWebSocketApp(appOptions)
  const h = await startHarness(app.url, env)
  const clients: WebSocket[] = []
  t.teardown(async () => {
    for (const ws of clients) ws.terminate()
    await h.close()
    await app.close()
  })
  const url = (path = '', project = 'proj', appName = 'app'): string =>
    `ws://127.0.0.1:${h.sidecar.port}/v4/${project}/${appName}${path}`
  const connect: Setup['connect'] = async (path, protocols, options) => {
    const outcome = await connectClient(url(path), protocols, options)
    if (outcome.kind === 'open') clients.push(outcome.ws)
    return outcome
  }
  return {
    app,
    h,
    url,
    connect,
    open: async (path, protocols, options) => {
      const appConnection = app.nextConnection()
      const outcome = await connect(path, protocols, options)
      if (outcome.kind !== 'open') throw new Error(`upgrade refused: ${outcome.status} ${outcome.body}`)
      return { ws: outcome.ws, outcome, app: await appConnection }
    },
    metrics: async () => await fetchMetrics(h.admin)
  }
}

async function bearer (s: Setup, projectId = 'proj'): Promise<{ headers: Record<string, string>, token: string }> {
  const token = await s.h.token(projectId)
  return { headers: { Authorization: `Bearer ${token}` }, token }
}

/** Splits a raw HTTP response into its status line, lower-cased headers and body. */
function parseRaw (raw: string): { statusLine: string, headers: Record<string, string>, body: string } {
  const end = raw.indexOf('\r\n\r\n')
  const [statusLine, ...lines] = raw.slice(0, end).split('\r\n')
  const headers: Record<string, string> = {}
  for (const line of lines) {
    const colon = line.indexOf(':')
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
  }
  return { statusLine: statusLine as string, headers, body: raw.slice(end + 4) }
}

/** Collects every message a client receives. */
function collect (ws: WebSocket): Array<{ data: Buffer, isBinary: boolean }> {
  const got: Array<{ data: Buffer, isBinary: boolean }> = []
  ws.on('message', (data, isBinary) => { got.push({ data: data as Buffer, isBinary }) })
  return got
}


t.test('text and binary frames pass byte for byte, both ways, in order', async t => {
  const s = await setup(t)
  const { headers } = await bearer(s)
  const { ws, app } = await s.open('/echo', [], { headers })

  const text = 'héllo ✓ wörld 🌍 \u0000 end'
  ws.send(text)
  const textEcho = await nextMessage(ws)
  t.equal(textEcho.isBinary, false, 'text stays text towards the client')
  t.equal(textEcho.data.toString('utf8'), text)
  t.equal(app.received[0]?.isBinary, false, 'text stays text towards the app')
  t.ok(app.received[0]?.data.equals(Buffer.from(text, 'utf8')), 'app got the exact UTF-8 bytes')

  const everyByte = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
  ws.send(everyByte)
  const byteEcho = await nextMessage(ws)
  t.equal(byteEcho.isBinary, true)
  t.equal(byteEcho.data.length, 256)
  t.ok(byteEcho.data.equals(everyByte), 'client got all 256 byte values back')
  t.equal(app.received[1]?.isBinary, true)
  t.ok(app.received[1]?.data.equals(everyByte), 'app got all 256 byte values')

  const big = randomBytes(1024 * 1024)
  ws.send(big)
  const bigEcho = await nextMessage(ws)
  t.equal(bigEcho.data.length, big.length)
  t.ok(bigEcho.data.equals(big), '1 MB random message back intact')
  t.ok(app.received[2]?.data.equals(big), 'app got the 1 MB message intact')

  const empty = await (async () => { ws.send(Buffer.alloc(0)); return await nextMessage(ws) })()
  t.equal(empty.isBinary, true)
  t.equal(empty.data.length, 0, 'an empty binary message stays empty')

  // App-initiated frames reach the client as sent.
  app.socket.send('from the app')
  const pushed = await nextMessage(ws)
  t.equal(pushed.isBinary, false)
  t.equal(pushed.data.toString(), 'from the app')

  const got = collect(ws)
  const sent = Array.from({ length: 500 }, (_, i) => `message ${i}`)
  for (const message of sent) ws.send(message)
  await eventually(() => got.length === sent.length)
  t.same(got.map(m => m.data.toString()), sent, '500 echoes come back in order')
  t.same(app.received.slice(4).map(m => m.data.toString()), sent, 'app received the 500 in order')
})

t.test('a subprotocol chosen by the app reaches the client', async t => {
  const s = await setup(t)
  const { headers } = await bearer(s)
  const { ws, app } = await s.open('/chat', ['chat.v2', 'chat.v1'], { headers })
  t.equal(ws.protocol, 'chat.v1')
  t.equal(app.socket.protocol, 'chat.v1')
  t.equal(app.headers['sec-websocket-protocol'], 'chat.v2,chat.v1', 'the offer reaches the app as the client sent it')

  const plain = await s.open('/chat', [], { headers })
  t.equal(plain.ws.protocol, '', 'no protocol asked, none chosen')
  t.equal(plain.app.headers['sec-websocket-protocol'], undefined)
})

t.test('per-message-deflate negotiation and compressed frames pass through', async t => {
  const s = await setup(t, {}, { perMessageDeflate: true })
  const { headers } = await bearer(s)
  const { ws, outcome, app } = await s.open('/z', [], { headers, perMessageDeflate: true })
  const appLine = s.app.responses[0]?.find(line => line.toLowerCase().startsWith('sec-websocket-extensions:'))
  t.ok(appLine, 'the app answered with an extension')
  const appValue = (appLine as string).slice((appLine as string).indexOf(':') + 1).trim()
  t.equal(outcome.upgrade.headers['sec-websocket-extensions'], appValue, 'client sees the app\'s extension header exactly')
  t.equal(app.headers['sec-websocket-extensions'], 'permessage-deflate; client_max_window_bits', 'the client\'s offer reaches the app as sent')
  t.equal(ws.extensions, 'permessage-deflate')

  const compressible = 'abcdefgh'.repeat(20_000)
  ws.send(compressible)
  const echo = await nextMessage(ws)
  t.equal(echo.data.toString(), compressible)
  t.equal(app.received[0]?.data.toString(), compressible)

  const off = await s.open('/z', [], { headers, perMessageDeflate: false })
  t.equal(off.app.headers['sec-websocket-extensions'], undefined, 'no offer, none forwarded')
  t.equal(off.outcome.upgrade.headers['sec-websocket-extensions'], undefined)
  t.equal(off.ws.extensions, '')
})

t.test('close codes and reasons pass both ways', async t => {
  const s = await setup(t)
  const { headers } = await bearer(s)

  const first = await s.open('/c', [], { headers })
  const clientSaw = clientClosed(first.ws)
  first.app.socket.close(4001, 'bye')
  t.same(await clientSaw, { code: 4001, reason: 'bye' }, 'app close code and reason reach the client')
  t.same(await first.app.closed, { code: 4001, reason: 'bye' })

  const second = await s.open('/c', [], { headers })
  const clientSaw2 = clientClosed(second.ws)
  second.ws.close(4002, 'client-bye')
  t.same(await second.app.closed, { code: 4002, reason: 'client-bye' }, 'client close code and reason reach the app')
  t.same(await clientSaw2, { code: 4002, reason: 'client-bye' })
})

t.test('handshake request follows the /v4 header rules', async t => {
  const s = await setup(t)
  const { headers, token } = await bearer(s)
  const sidecarHost = `127.0.0.1:${s.h.sidecar.port}`

  const kept = await s.open('/chat/room?x=1&webhookEndpoint=http%3A%2F%2F127.0.0.1%3A9%2Fhook&y=two%20words', [], {
    headers: { ...headers, 'X-Request-Id': 'ws-run-1', 'X-Webhook-Secret': 's3cret-value', 'X-Custom': 'kept' }
  })
  t.equal(kept.app.url, '/chat/room?x=1&y=two%20words', 'app path after /v4/proj/app, query kept without webhookEndpoint')
  t.equal(kept.app.headers['x-request-id'], 'ws-run-1')
  t.equal(kept.outcome.upgrade.headers['x-request-id'], 'ws-run-1', 'the 101 carries the run id back to the caller')
  t.equal(kept.app.headers['x-forwarded-for'], '127.0.0.1')
  t.equal(kept.app.headers['x-forwarded-proto'], 'http')
  t.equal(kept.app.headers['x-forwarded-host'], sidecarHost)
  t.equal(kept.app.headers.authorization, undefined, 'Authorization removed when the sidecar checked it')
  t.equal(kept.app.headers['x-webhook-secret'], undefined)
  t.equal(kept.app.headers['x-custom'], 'kept')
  t.equal(kept.app.headers.upgrade, 'websocket')
  t.match(kept.app.headers.connection, /upgrade/i)

  const replaced = await s.open('', [], { headers: { ...headers, 'X-Request-Id': 'a.b', 'X-Forwarded-For': '10.0.0.1' } })
  t.equal(replaced.app.url, '/', 'empty app path becomes /')
  t.match(replaced.app.headers['x-request-id'], UUID, 'an invalid run id is replaced by a UUID')
  t.equal(replaced.app.headers['x-forwarded-for'], '10.0.0.1, 127.0.0.1', 'prior X-Forwarded-For is extended')
  const replacedId = replaced.app.headers['x-request-id'] as string
  replaced.ws.close()
  await replaced.app.closed
  await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.runId === replacedId))

  const query = await s.open('?only=1', [], { headers })
  t.equal(query.app.url, '/?only=1')

  // Hop-by-hop headers over a raw handshake: Connection-named ones, Keep-Alive, TE, Proxy-Authorization.
  const raw = await openRaw(s.h.sidecar.port)
  t.teardown(() => raw.destroy())
  const got: Buffer[] = []
  raw.on('data', (chunk: Buffer) => got.push(chunk))
  const appConnection = s.app.nextConnection()
  raw.write(rawHandshake('/v4/proj/app/hop', sidecarHost, {
    Connection: 'Upgrade, X-Hop',
    'X-Hop': 'drop-me',
    'Keep-Alive': 'timeout=5',
    TE: 'trailers',
    'Proxy-Authorization': 'Basic Zm9vOmJhcg==',
    Authorization: `Bearer ${token}`,
    'X-End-To-End': 'stays'
  }))
  const hop = await appConnection
  t.equal(hop.headers['x-hop'], undefined, 'a header named in Connection is dropped')
  t.equal(hop.headers['keep-alive'], undefined)
  t.equal(hop.headers.te, undefined)
  t.equal(hop.headers['proxy-authorization'], undefined)
  t.equal(hop.headers['x-end-to-end'], 'stays')
  t.equal(hop.headers.upgrade, 'websocket', 'Upgrade kept on a WebSocket upgrade')
  await eventually(() => Buffer.concat(got).toString('latin1').includes('\r\n\r\n'))
  t.equal(parseRaw(Buffer.concat(got).toString('latin1')).statusLine, 'HTTP/1.1 101 Switching Protocols')

  t.notOk(JSON.stringify(s.h.logs).includes(token), 'no token in any log line')
  t.notOk(JSON.stringify(s.h.logs).includes('s3cret-value'), 'no webhook secret in any log line')
})

t.test('auth on the upgrade request', async t => {
  const s = await setup(t)
  const { headers, token } = await bearer(s)

  const missing = await rawUpgrade(s.h.sidecar.port, '/v4/proj/app/x', { 'X-Request-Id': 'ws-auth-1' })
  const parsed = parseRaw(missing)
  t.equal(parsed.statusLine, 'HTTP/1.1 401 Unauthorized')
  t.match(parsed.headers['content-type'], /^application\/json/)
  t.equal(parsed.headers['x-request-id'], 'ws-auth-1', 'the run id comes back on the error')
  t.equal(Number(parsed.headers['content-length']), Buffer.byteLength(parsed.body))
  const body = JSON.parse(parsed.body) as Record<string, unknown>
  t.same(Object.keys(body), ['message'])
  t.type(body.message, 'string')

  const viaClient = await s.connect('/x')
  t.equal(viaClient.kind, 'refused')
  if (viaClient.kind === 'refused') {
    t.equal(viaClient.status, 401)
    t.same(Object.keys(JSON.parse(viaClient.body) as object), ['message'])
  }

  const malformed = await s.connect('/x', [], { headers: { Authorization: 'Basic Zm9vOmJhcg==' } })
  t.equal(malformed.kind === 'refused' && malformed.status, 401, 'a non-Bearer Authorization is 401')

  const expired = await s.connect('/x', [], { headers: { Authorization: `Bearer ${await s.h.issuer.sign('proj', { ttlSeconds: -60 })}` } })
  t.equal(expired.kind === 'refused' && expired.status, 401, 'an expired token is 401')

  const other = await s.connect('/x', [], { headers: await bearer(s, 'other-project').then(b => b.headers) })
  t.equal(other.kind, 'refused')
  if (other.kind === 'refused') {
    t.equal(other.status, 403, 'a token for another project is 403')
    t.same(Object.keys(JSON.parse(other.body) as object), ['message'])
  }

  const queryOnly = await s.connect(`/x?access_token=${token}`)
  t.equal(queryOnly.kind === 'refused' && queryOnly.status, 401, 'access_token alone is refused when ALLOW_QUERY_TOKEN is unset')

  t.equal(s.app.handshakes.length, 0, 'no refused upgrade reached the app')

  const ok = await s.open('/x', [], { headers })
  t.equal(ok.ws.readyState, ok.ws.OPEN, 'a valid token opens')
  t.equal(s.app.handshakes.length, 1)

  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_requests_total', { route: 'websocket', code: '401' }) === 5)
  t.equal(sampleValue(await s.metrics(), 'sidecar_requests_total', { route: 'websocket', code: '403' }), 1)
  t.notOk(JSON.stringify(s.h.logs).includes(token), 'no token in any log line')
})

t.test('ALLOW_QUERY_TOKEN: access_token opens and never reaches the app', async t => {
  const s = await setup(t, { ALLOW_QUERY_TOKEN: 'true' })
  const token = await s.h.token()
  const { ws, app } = await s.open(`/feed?a=1&access_token=${token}&b=2`)
  t.equal(ws.readyState, ws.OPEN)
  t.equal(app.url, '/feed?a=1&b=2', 'access_token removed, the rest kept in order')
  t.equal(app.headers.authorization, undefined)
  t.equal(s.app.handshakes.length, 1)

  const wrongProject = await s.connect(`/feed?access_token=${await s.h.token('other')}`)
  t.equal(wrongProject.kind === 'refused' && wrongProject.status, 403)

  ws.close()
  await app.closed
  await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.status === 101))
  t.notOk(JSON.stringify(s.h.logs).includes(token), 'the query token is never logged')
  t.notOk(JSON.stringify(s.h.logs).includes('access_token'), 'nor the parameter name (path is logged without the query)')
})

t.test('DISABLE_AUTH: no token needed and Authorization passes through', async t => {
  const s = await setup(t, { DISABLE_AUTH: 'true' })
  const bare = await s.open('/open')
  t.equal(bare.ws.readyState, bare.ws.OPEN)
  t.equal(bare.app.headers.authorization, undefined)
  const withHeader = await s.open('/open', [], { headers: { Authorization: 'Bearer app-level-token' } })
  t.equal(withHeader.app.headers.authorization, 'Bearer app-level-token')
})

t.test('routing: PROJECT_ID / APP_NAME and non-/v4 upgrades', async t => {
  const s = await setup(t, { PROJECT_ID: 'proj', APP_NAME: 'app' })
  const { headers } = await bearer(s)
  const port = s.h.sidecar.port

  const otherApp = parseRaw(await rawUpgrade(port, '/v4/proj/other/x', headers))
  t.equal(otherApp.statusLine, 'HTTP/1.1 404 Not Found')
  t.same(Object.keys(JSON.parse(otherApp.body) as object), ['message'])

  const otherProject = parseRaw(await rawUpgrade(port, '/v4/elsewhere/app/x', { Authorization: `Bearer ${await s.h.token('elsewhere')}` }))
  t.equal(otherProject.statusLine, 'HTTP/1.1 404 Not Found')

  const noTokenWrongApp = parseRaw(await rawUpgrade(port, '/v4/proj/other/x'))
  t.equal(noTokenWrongApp.statusLine, 'HTTP/1.1 404 Not Found', 'route is checked before auth')

  const shortRoute = parseRaw(await rawUpgrade(port, '/v4/proj', headers))
  t.equal(shortRoute.statusLine, 'HTTP/1.1 404 Not Found')

  for (const path of ['/ws', '/v2/apps', '/']) {
    const notV4 = parseRaw(await rawUpgrade(port, path, headers))
    t.equal(notV4.statusLine, 'HTTP/1.1 404 Not Found', `upgrade on ${path} is 404`)
    t.match(notV4.headers['x-request-id'], UUID, 'the 404 carries a run id')
    t.same(Object.keys(JSON.parse(notV4.body) as object), ['message'])
  }

  const viaClient = await connectClient(s.url('/x', 'proj', 'other'), [], { headers })
  t.equal(viaClient.kind === 'refused' && viaClient.status, 404)

  // app paths starting with `_` are the sidecar's, however spelled: never upgraded at the app
  for (const path of ['/_ws', '/_runs/r1/events', '/%5Fws', '//_ws']) {
    const reserved = parseRaw(await rawUpgrade(port, `/v4/proj/app${path}`, headers))
    t.equal(reserved.statusLine, 'HTTP/1.1 404 Not Found', `upgrade on ${path} is 404`)
    t.equal(reserved.body, '{"message":"no such route"}')
  }

  t.equal(s.app.handshakes.length, 0, 'nothing reached the app')
  const ok = await s.open('/x', [], { headers })
  t.equal(ok.app.url, '/x')
})

t.test('an upgrade the app refuses reaches the caller with the app\'s status', async t => {
  const s = await setup(t, {}, {
    onUpgrade: req => (req.url as string).startsWith('/refuse')
      ? { refuse: { status: 403, reason: 'Forbidden', body: 'app says no', headers: { 'x-app-reason': 'nope' } } }
      : undefined
  })
  const { headers } = await bearer(s)

  const raw = parseRaw(await rawUpgrade(s.h.sidecar.port, '/v4/proj/app/refuse', { ...headers, 'X-Request-Id': 'ws-refused-1' }))
  t.equal(raw.statusLine, 'HTTP/1.1 403 Forbidden')
  t.equal(raw.headers['x-app-reason'], 'nope')
  t.equal(raw.headers['content-type'], 'text/plain')
  t.equal(raw.body, 'app says no')

  const viaClient = await s.connect('/refuse', [], { headers })
  t.equal(viaClient.kind, 'refused')
  if (viaClient.kind === 'refused') {
    t.equal(viaClient.status, 403)
    t.equal(viaClient.body, 'app says no')
  }
  t.equal(s.app.handshakes.length, 2)

  await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.runId === 'ws-refused-1'))
  const line = s.h.logs.find(line => line.msg === 'websocket' && line.runId === 'ws-refused-1')
  t.equal(line?.status, 403)
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_requests_total', { route: 'websocket', code: '403' }) === 2)

  const fine = await s.open('/fine', [], { headers })
  t.equal(fine.ws.readyState, fine.ws.OPEN, 'other paths still upgrade')
})

t.test('app down after it was ready: 502 with a JSON body, and the sidecar keeps serving', async t => {
  const port = await freePort()
  let app: WebSocketApp | undefined = await startWebSocketApp({ port })
  const h = await startHarness(`http://127.0.0.1:${port}`)
  t.teardown(async () => {
    await h.close()
    await app?.close()
  })
  // 502 means the app was ready and is now unreachable; before its first readiness calls wait
  await eventually(async () => (await fetch(`${h.admin}/readyz`)).status === 200)
  await app.close()
  app = undefined
  const token = await h.token()
  const headers = { Authorization: `Bearer ${token}`, 'X-Request-Id': 'ws-down-1' }

  for (let i = 0; i < 2; i++) {
    const parsed = parseRaw(await rawUpgrade(h.sidecar.port, '/v4/proj/app/x', headers))
    t.equal(parsed.statusLine, 'HTTP/1.1 502 Bad Gateway', `attempt ${i + 1}`)
    t.match(parsed.headers['content-type'], /^application\/json/)
    t.equal(parsed.headers['x-request-id'], 'ws-down-1')
    const body = JSON.parse(parsed.body) as Record<string, unknown>
    t.same(Object.keys(body), ['message'])
    t.type(body.message, 'string')
  }
  const viaClient = await connectClient(`ws://127.0.0.1:${h.sidecar.port}/v4/proj/app/x`, [], { headers })
  t.equal(viaClient.kind === 'refused' && viaClient.status, 502)

  const live = await fetch(`${h.admin}/livez`)
  t.equal(live.status, 200)
  await live.arrayBuffer()

  // The app comes up on that port: the same sidecar now upgrades.
  app = await startWebSocketApp({ port })
  const opened = await connectClient(`ws://127.0.0.1:${h.sidecar.port}/v4/proj/app/x`, [], { headers })
  t.equal(opened.kind, 'open')
  if (opened.kind === 'open') {
    t.teardown(() => opened.ws.terminate())
    opened.ws.send('after')
    t.equal((await nextMessage(opened.ws)).data.toString(), 'after')
  }
  await eventually(async () => sampleValue(await fetchMetrics(h.admin), 'sidecar_requests_total', { route: 'websocket', code: '502' }) === 3)
})

t.test('a caller that resets mid-connection does not hurt the sidecar', async t => {
  const s = await setup(t)
  const { headers } = await bearer(s)

  const { ws, app } = await s.open('/flow', [], { headers })
  const got = collect(ws)
  let sending = true
  const pump = (): void => {
    if (!sending) return
    ws.send(randomBytes(4096), () => { setImmediate(pump) })
  }
  pump()
  await eventually(() => got.length >= 20)
  sending = false
  ws.terminate()
  await eventually(() => app.socket.readyState === app.socket.CLOSED)
  t.equal((await app.closed).code, 1006, 'the app side sees the connection drop')
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_websocket_connections') === 0)

  const again = await s.open('/flow', [], { headers })
  again.ws.send('still here')
  t.equal((await nextMessage(again.ws)).data.toString(), 'still here', 'a new WebSocket works')
  again.ws.close()
  await again.app.closed
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_websocket_connections') === 0)
})

/** A setup whose app holds every `/held…` handshake until the test releases it. */
async function heldSetup (t: Test): Promise<Setup & { release: () => void }> {
  let release: () => void = () => {}
  const held = new Promise<void>(resolve => { release = resolve })
  const s = await setup(t, {}, {
    onUpgrade: req => (req.url as string).startsWith('/held') ? { hold: held } : undefined
  })
  t.teardown(() => { release() })
  return { ...s, release }
}

/** Sends a raw handshake for `/held` and resolves once the app has it (the sidecar forwarded it). */
async function sendHeldHandshake (s: Setup, headers: Record<string, string>, runId: string): Promise<Socket> {
  const raw = await openRaw(s.h.sidecar.port)
  raw.on('error', () => {})
  const before = s.app.handshakes.length
  raw.write(rawHandshake('/v4/proj/app/held', `127.0.0.1:${s.h.sidecar.port}`, { ...headers, 'X-Request-Id': runId }))
  await eventually(() => s.app.handshakes.length === before + 1)
  return raw
}

async function expectNothingLeft (t: Test, s: Setup, headers: Record<string, string>): Promise<void> {
  await eventually(() => s.app.openSockets() === 0)
  t.ok(s.app.connections.every(c => c.socket.readyState === c.socket.CLOSED), 'every app-side WebSocket is closed')
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_websocket_connections') === 0)
  t.equal(sampleValue(await s.metrics(), 'sidecar_inflight_requests'), 0)
  t.equal(s.h.sidecar.inflight.count, 0, 'nothing left for a drain to wait for')
  const fresh = await s.open('/after', [], { headers })
  fresh.ws.send('ok')
  t.equal((await nextMessage(fresh.ws)).data.toString(), 'ok', 'a new WebSocket works afterwards')
}

t.test('a caller that resets (RST) before the 101 leaves nothing open', async t => {
  const s = await heldSetup(t)
  const { headers } = await bearer(s)
  const raw = await sendHeldHandshake(s, headers, 'ws-reset-1')
  raw.resetAndDestroy()
  await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.runId === 'ws-reset-1'))
  s.release()
  await expectNothingLeft(t, s, headers)
})

t.test('a caller that closes (FIN) before the 101 leaves nothing open', async t => {
  const s = await heldSetup(t)
  const { headers } = await bearer(s)
  const raw = await sendHeldHandshake(s, headers, 'ws-gone-1')
  raw.destroy()
  s.release()
  await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.runId === 'ws-gone-1'))
  await expectNothingLeft(t, s, headers)
})

t.test('callers that vanish right after their handshake leave nothing open', async t => {
  const s = await setup(t)
  const { headers } = await bearer(s)
  // Each sends its whole handshake, then its FIN, then is gone (so the sidecar sees all five).
  for (let i = 0; i < 5; i++) {
    const quick = await openRaw(s.h.sidecar.port)
    quick.on('error', () => {})
    quick.end(rawHandshake('/v4/proj/app/quick', `127.0.0.1:${s.h.sidecar.port}`, headers), () => { quick.destroy() })
  }
  await eventually(() => s.h.logs.filter(line => line.msg === 'websocket').length === 5)
  await expectNothingLeft(t, s, headers)
})

t.test('metrics and the log line of a WebSocket', async t => {
  const s = await setup(t)
  const { headers, token } = await bearer(s)
  t.equal(sampleValue(await s.metrics(), 'sidecar_websocket_connections'), 0)

  const { ws, app } = await s.open('/chat?secret-query=1', [], { headers: { ...headers, 'X-Request-Id': 'ws-metrics-1' } })
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_websocket_connections') === 1)
  t.equal(sampleValue(await s.metrics(), 'sidecar_inflight_requests'), 1, 'an open WebSocket is in flight')

  const second = await s.open('/chat', [], { headers })
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_websocket_connections') === 2)
  second.ws.close()
  await second.app.closed
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_websocket_connections') === 1)

  ws.close(1000, 'done')
  await app.closed
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_websocket_connections') === 0)
  await eventually(async () => sampleValue(await s.metrics(), 'sidecar_requests_total', { route: 'websocket', code: '101' }) === 2)
  t.equal(sampleValue(await s.metrics(), 'sidecar_inflight_requests'), 0)

  await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.runId === 'ws-metrics-1'))
  const lines = s.h.logs.filter(line => line.msg === 'websocket' && line.runId === 'ws-metrics-1')
  t.equal(lines.length, 1, 'one line per WebSocket')
  const line = lines[0] as Record<string, unknown>
  t.equal(line.status, 101)
  t.equal(line.method, 'GET')
  t.equal(line.path, '/v4/proj/app/chat', 'path without the query string')
  t.type(line.duration, 'number')
  t.equal(s.h.logs.filter(line => line.msg === 'websocket').length, 2)
  const allLogs = JSON.stringify(s.h.logs)
  t.notOk(allLogs.includes(token), 'no token text in any log line')
  t.notOk(allLogs.includes('secret-query'), 'no query string in any log line')
})
