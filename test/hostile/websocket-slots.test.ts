import { once } from 'node:events'
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { eventually, type Harness, startHarness } from '../helpers/sidecar-harness.ts'
import { connectClient, openRaw, rawHandshake, startWebSocketApp, type WebSocketApp, type WebSocketAppOptions } from '../helpers/websocket-app.ts'

// A WebSocket upgrade must never hold a concurrency slot, a queue place or a drain entry past
// its answer, however the caller behaves on the socket afterwards.

interface Setup { app: WebSocketApp, h: Harness, headers: Record<string, string> }

async function setup (t: Test, env: Record<string, string>, appOptions: WebSocketAppOptions = {}): Promise<Setup> {
  const app = await startWebSocketApp(appOptions)
  const h = await startHarness(app.url, env)
  const sockets: Socket[] = []
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy()
    await h.close()
    await app.close()
  })
  const headers = { Authorization: `Bearer ${await h.token()}` }
  return { app, h, headers }
}

/**
 * Writes a handshake plus `extra` bytes from a caller that never closes its side of the connection
 * (it stays half-open after the sidecar's FIN); `received` is what the sidecar sent so far.
 */
async function handshakeWithExtra (h: Harness, path: string, headers: Record<string, string>, extra: string): Promise<{ socket: Socket, received: () => string }> {
  const socket = connect({ port: h.sidecar.port, host: '127.0.0.1', allowHalfOpen: true })
  await once(socket, 'connect')
  socket.on('error', () => {})
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  socket.write(rawHandshake(path, `127.0.0.1:${h.sidecar.port}`, headers) + extra)
  return { socket, received: () => Buffer.concat(chunks).toString('latin1') }
}

const refuseAll: WebSocketAppOptions = {
  onUpgrade: req => (req.url as string).startsWith('/refuse')
    ? { refuse: { status: 403, reason: 'Forbidden', body: 'no' } }
    : undefined
}

t.test('a refused upgrade with bytes after its headers frees its slot once answered', async t => {
  const s = await setup(t, { REPLICA_CONCURRENCY: '2' }, refuseAll)
  const callers = await Promise.all([1, 2].map(async i =>
    await handshakeWithExtra(s.h, '/v4/proj/app/refuse', { ...s.headers, 'X-Request-Id': `ws-extra-${i}` }, 'x')))
  for (const caller of callers) {
    await eventually(() => caller.received().includes('\r\n\r\nno'))
    t.match(caller.received(), /^HTTP\/1\.1 403 Forbidden\r\n/, 'the app\'s refusal reaches the caller')
  }
  // the callers keep their sockets open and never read or close: the sidecar must let go anyway
  await eventually(async () => await metric(s.h, 'sidecar_inflight_requests') === 0)
  t.equal(s.h.sidecar.inflight.count, 0, 'nothing left for a drain to wait for')
  for (const id of ['ws-extra-1', 'ws-extra-2']) {
    await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.runId === id))
    t.equal(s.h.logs.find(line => line.msg === 'websocket' && line.runId === id)?.status, 403)
  }
  const next = await connectClient(`ws://127.0.0.1:${s.h.sidecar.port}/v4/proj/app/fine`, [], { headers: s.headers })
  t.equal(next.kind, 'open', 'a later upgrade gets a slot at once')
  if (next.kind === 'open') next.ws.terminate()
})

t.test('without a limit, a refused upgrade with extra bytes leaves no in-flight entry for a drain to wait on', async t => {
  const s = await setup(t, { DISABLE_AUTH: 'true' }, refuseAll)
  const caller = await handshakeWithExtra(s.h, '/v4/proj/app/refuse', { 'X-Request-Id': 'ws-extra-nolimit' }, 'xyz')
  await eventually(() => caller.received().includes('\r\n\r\nno'))
  await eventually(() => s.h.sidecar.inflight.count === 0)
  await eventually(() => caller.socket.readableEnded) // the sidecar's FIN
  t.equal(caller.socket.writableEnded, false, 'the caller never ends its side')
  t.equal(await metric(s.h, 'sidecar_inflight_requests'), 0)
})

t.test('an upgrade the app refuses with 200 and extra bytes frees its slot too', async t => {
  const s = await setup(t, { REPLICA_CONCURRENCY: '1' }, {
    onUpgrade: () => ({ refuse: { status: 200, reason: 'OK', body: 'plain page' } })
  })
  const caller = await handshakeWithExtra(s.h, '/v4/proj/app/page', s.headers, '\r\n')
  await eventually(() => caller.received().includes('plain page'))
  await eventually(async () => await metric(s.h, 'sidecar_inflight_requests') === 0)
  t.equal(s.h.sidecar.inflight.count, 0)
})

t.test('queued upgrades whose callers half-close leave the queue at once', async t => {
  let release: () => void = () => {}
  const held = new Promise<void>(resolve => { release = resolve })
  const s = await setup(t, { REPLICA_CONCURRENCY: '1' }, {
    onUpgrade: req => (req.url as string).startsWith('/held') ? { hold: held } : undefined
  })
  t.teardown(() => { release() })
  // the only slot is taken by a handshake the app holds
  const holder = await handshakeWithExtra(s.h, '/v4/proj/app/held', s.headers, '')
  await eventually(() => s.app.handshakes.length === 1)

  const waiting: Socket[] = []
  for (let i = 0; i < 5; i++) {
    const caller = await handshakeWithExtra(s.h, '/v4/proj/app/queued', { ...s.headers, 'X-Request-Id': `ws-halfclose-${i}` }, '')
    waiting.push(caller.socket)
  }
  await eventually(async () => await metric(s.h, 'sidecar_queued_requests') === 5)
  for (const socket of waiting) socket.end() // FIN: the caller is leaving, but its socket is not destroyed yet
  await eventually(async () => await metric(s.h, 'sidecar_queued_requests') === 0, 2000)
  t.equal(await metric(s.h, 'sidecar_inflight_requests'), 1, 'the holder keeps its slot')
  for (let i = 0; i < 5; i++) {
    await eventually(() => s.h.logs.some(line => line.msg === 'websocket' && line.runId === `ws-halfclose-${i}`))
  }
  t.same(s.h.logs.filter(line => line.msg === 'websocket' && String(line.runId).startsWith('ws-halfclose-')).map(line => line.status),
    [499, 499, 499, 499, 499], 'each is logged as a caller that left')
  t.equal(s.app.handshakes.length, 1, 'none of them reached the app')
  holder.socket.destroy()
})

t.test('bytes a caller sends while its upgrade waits for a slot reach the app after the 101', async t => {
  const s = await setup(t, { REPLICA_CONCURRENCY: '1' })
  const first = await connectClient(`ws://127.0.0.1:${s.h.sidecar.port}/v4/proj/app/echo`, [], { headers: s.headers })
  if (first.kind !== 'open') throw new Error('first upgrade refused')
  // a masked text frame "hi", sent right behind the handshake while the only slot is taken
  const frame = Buffer.from([0x81, 0x82, 1, 2, 3, 4, 'h'.charCodeAt(0) ^ 1, 'i'.charCodeAt(0) ^ 2])
  const socket = await openRaw(s.h.sidecar.port)
  socket.on('error', () => {})
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  const connected = s.app.nextConnection()
  socket.write(rawHandshake('/v4/proj/app/echo', `127.0.0.1:${s.h.sidecar.port}`, s.headers))
  await eventually(async () => await metric(s.h, 'sidecar_queued_requests') === 1)
  socket.write(frame)
  first.ws.terminate()
  const app = await connected
  await eventually(() => app.received.length === 1)
  t.equal(app.received[0]?.data.toString(), 'hi', 'the early frame reached the app intact')
  await eventually(() => Buffer.concat(chunks).includes(Buffer.from([0x81, 0x02, 0x68, 0x69])))
  t.match(Buffer.concat(chunks).toString('latin1'), /^HTTP\/1\.1 101 /, 'the caller got its 101, then the echo')
  socket.destroy()
})

t.test('an upgrade the sidecar refuses (401, 404) with extra bytes is closed once answered', async t => {
  const s = await setup(t, {})
  for (const [path, headers, status] of [
    ['/v4/proj/app/ws', {}, 401],
    ['/v4/other/app/ws', s.headers, 403],
    ['/v9/nothing', s.headers, 404]
  ] as const) {
    const caller = await handshakeWithExtra(s.h, path, headers, 'x')
    await eventually(() => caller.socket.readableEnded) // the sidecar's FIN: the caller never sends its own
    t.match(caller.received(), new RegExp(`^HTTP/1\\.1 ${status} `), `${path}: the sidecar's answer`)
  }
  await eventually(() => s.h.sidecar.inflight.count === 0)
  t.equal(await metric(s.h, 'sidecar_inflight_requests'), 0)
})
