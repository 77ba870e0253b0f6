import { once } from 'node:events'
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { AnswerWriter, type AnswerTap } from '../../src/shared/answer-writer.ts'

interface Got { status: number, type: string | undefined, body: string }

/** One real request on loopback: the server side's req/res, and what the caller got. */
async function exchange (t: { teardown: (fn: () => void) => void }): Promise<{ req: IncomingMessage, res: ServerResponse, got: Promise<Got | undefined> }> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const arrived = once(server, 'request') as Promise<[IncomingMessage, ServerResponse]>
  const got = new Promise<Got | undefined>(resolve => {
    const caller = request({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', agent: false }, res => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'], body: Buffer.concat(chunks).toString() }) })
      res.on('error', () => { resolve(undefined) })
    })
    caller.on('error', () => { resolve(undefined) })
    caller.end()
  })
  const [req, res] = await arrived
  return { req, res, got }
}

/** A tap that writes down everything it sees, in order. */
function recordingTap (seen: string[], hold?: Promise<unknown>): AnswerTap {
  return {
    head: (status, headers) => { seen.push(`head ${status} ${String(headers['content-type'])}`) },
    bytes: chunk => { seen.push(`bytes ${chunk.toString()}`) },
    ending: () => { seen.push('ending'); return hold }
  }
}

t.test('without taps, the writer writes straight to the response', async t => {
  const { req, res, got } = await exchange(t)
  const out = new AnswerWriter(req, res)
  out.writeHead(201, { 'content-type': 'text/plain' })
  t.equal(out.headersSent, true)
  t.equal(out.write('ab'), true)
  out.end('c')
  t.equal(out.writableEnded, true)
  t.same(await got, { status: 201, type: 'text/plain', body: 'abc' })
})

t.test('taps see the head, every chunk and the end, in order; a second end is ignored', async t => {
  const { req, res, got } = await exchange(t)
  const out = new AnswerWriter(req, res)
  const seen: string[] = []
  out.tap(recordingTap(seen))
  out.writeHead(200, { 'content-type': 'application/json' })
  out.write(Buffer.from('{"a":'))
  out.end('1}')
  out.end('ignored')
  t.same(seen, ['head 200 application/json', 'bytes {"a":', 'bytes 1}', 'ending'])
  t.same(await got, { status: 200, type: 'application/json', body: '{"a":1}' })
})

t.test("a tap's ending holds the caller's last bytes until it settles", async t => {
  const { req, res, got } = await exchange(t)
  const out = new AnswerWriter(req, res)
  let release: () => void = () => {}
  const held = new Promise<void>(resolve => { release = resolve })
  const seen: string[] = []
  out.tap(recordingTap(seen, held))
  out.writeHead(200, { 'content-type': 'text/plain' })
  out.end('done')
  t.equal(res.writableEnded, false, 'the response has not ended while the tap holds it')
  t.equal(out.writableEnded, true, 'the writer has: nothing more may be written')
  release()
  t.same(await got, { status: 200, type: 'text/plain', body: 'done' })
})

t.test('a muted writer sends nothing more to the socket, and its taps still see everything', async t => {
  const { req, res, got } = await exchange(t)
  const out = new AnswerWriter(req, res)
  const seen: string[] = []
  out.tap(recordingTap(seen))
  res.destroy() // the caller left
  await got
  out.mute()
  t.equal(out.destroyed, true)
  out.writeHead(200, { 'content-type': 'text/plain' })
  t.equal(out.write('kept'), true, 'a muted writer never pauses the app')
  out.end()
  t.same(seen, ['head 200 text/plain', 'bytes kept', 'ending'])
  t.equal(out.headersSent, true)
  t.equal(res.headersSent, false, 'the response itself got nothing')
})

t.test('an unread writer (the caller answered otherwise) has no response: it is closed at once and sees everything', async t => {
  const { req, res, got } = await exchange(t)
  res.writeHead(202).end('{}') // what the caller got
  await got
  const out = AnswerWriter.unread(req)
  const seen: string[] = []
  out.tap(recordingTap(seen))
  let closed = false
  out.onClose(() => { closed = true })
  t.equal(closed, true)
  t.equal(out.req, req)
  out.writeHead(200, { 'content-type': 'text/event-stream' })
  out.flushHeaders()
  out.write('data: 1\n\n')
  out.end()
  t.same(seen, ['head 200 text/event-stream', 'bytes data: 1\n\n', 'ending'])
})
