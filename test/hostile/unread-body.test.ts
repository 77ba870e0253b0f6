import { connect, type Socket } from 'node:net'
import t from 'tap'
import { startHarness, startTestServer } from '../helpers/sidecar-harness.ts'
import { UNREAD_BODY_MS } from '../../src/shared/http-answers.ts'
import { parseResponses } from './hostile-kit.ts'

// A caller the sidecar refuses before reading its body must not keep the connection by
// trickling that body: the rest must arrive within UNREAD_BODY_MS of the answer, or the
// connection is closed. A body that arrived whole keeps the connection alive as before.

const app = await startTestServer((_req, res) => { res.end('app') })
const h = await startHarness(app.url, { PROJECT_ID: 'proj' })
const token = await h.token()
const otherToken = await h.token('other')
t.teardown(async () => { await h.close(); await app.close() })

interface Trickle { status: number, closedAfterMs: number | undefined, bytesSent: number }

/** Sends headers announcing a 1 MB body, then one byte every 100 ms; reports the answer and whether the sidecar closed within `ms`. */
async function trickle (target: string, headers: string, ms = UNREAD_BODY_MS + 2000): Promise<Trickle> {
  const socket: Socket = connect(h.sidecar.port, '127.0.0.1')
  socket.on('error', () => {})
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  socket.write(`POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\nContent-Type: application/json\r\n${headers}\r\n`)
  let bytesSent = 0
  const drip = setInterval(() => { if (!socket.destroyed) { socket.write('x'); bytesSent++ } }, 100)
  const answeredAt = await new Promise<number>((resolve, reject) => {
    const check = (): void => {
      if (Buffer.concat(chunks).includes('\r\n\r\n')) { socket.off('data', check); resolve(Date.now()) }
    }
    socket.on('data', check)
    setTimeout(() => { reject(new Error('no answer')) }, ms)
  })
  const closedAfterMs = await new Promise<number | undefined>(resolve => {
    const timer = setTimeout(() => { resolve(undefined) }, ms)
    // a FIN, or a reset when trickled bytes were still unread on the sidecar's side
    const closed = (): void => { clearTimeout(timer); resolve(Date.now() - answeredAt) }
    socket.once('end', closed)
    socket.once('close', closed)
  })
  clearInterval(drip)
  socket.destroy()
  const { responses } = parseResponses(Buffer.concat(chunks), true)
  return { status: responses[0]?.status ?? 0, closedAfterMs, bytesSent }
}

for (const [name, target, headers, status] of [
  ['no token', '/v4/proj/app/run', '', 401],
  ['another project\'s token', '/v4/proj/app/run', `Authorization: Bearer ${otherToken}\r\n`, 403],
  ['another project', '/v4/other/app/run', `Authorization: Bearer ${token}\r\n`, 404],
  ['a malformed webhookEndpoint', '/v4/proj/app/run?webhookEndpoint=nope', `Authorization: Bearer ${token}\r\n`, 400],
  ['an unknown route', '/nowhere', '', 404],
  ['a POST to /v2', '/v2/projects/p/apps/a/builds/b', '', 405]
] as const) {
  t.test(`refused (${status}, ${name}) before the body arrived: the connection closes soon after the answer`, async t => {
    const result = await trickle(target, headers)
    t.equal(result.status, status)
    t.not(result.closedAfterMs, undefined, 'the sidecar closed the connection while the caller was still trickling')
    t.ok((result.closedAfterMs ?? Infinity) < UNREAD_BODY_MS + 1000, `closed ${String(result.closedAfterMs)} ms after the answer`)
  })
}

t.test('a refused request whose whole body arrived keeps its connection for the next request', async t => {
  const socket: Socket = connect(h.sidecar.port, '127.0.0.1')
  socket.on('error', () => {})
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  const body = '{"a":1}'
  socket.write(`POST /v4/proj/app/run HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
  socket.write(`GET /v4/proj/app/again HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)
  await new Promise(resolve => socket.once('close', resolve))
  const { responses } = parseResponses(Buffer.concat(chunks), true)
  t.same(responses.map(r => r.status), [401, 200], 'both requests were answered on one connection')
  t.not(responses[0]?.headers.connection, 'close')
})
