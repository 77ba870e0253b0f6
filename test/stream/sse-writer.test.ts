import { once } from 'node:events'
import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { connect } from 'node:net'
import t from 'tap'
import { SidecarMetrics } from '../../src/metrics/metrics.ts'
import { SseWriter } from '../../src/stream/sse-writer.ts'
import { AnswerWriter } from '../../src/shared/answer-writer.ts'
import { sleep } from '../helpers/timing.ts'

// A stream can be ended (or failed) while the caller is not reading: the last bytes then wait in
// the response's buffer, 'close' has not come yet, and the keep-alive timer must not write after
// the end (ERR_STREAM_WRITE_AFTER_END has no listener on a response: it would crash the sidecar).

for (const how of ['end', 'fail'] as const) {
  t.test(`${how}() while the caller is not reading: no heartbeat after the end`, async t => {
    const metrics = new SidecarMetrics()
    const errors: string[] = []
    let ended: () => void = () => {}
    const endedP = new Promise<void>(resolve => { ended = resolve })
    let response: ServerResponse | undefined
    let closed: Promise<void> = Promise.resolve()
    const server = createServer((req, res) => {
      response = res
      closed = new Promise(resolve => { res.once('close', () => { resolve() }) })
      res.on('error', (error: NodeJS.ErrnoException) => { errors.push(error.code ?? error.message) })
      const writer = new SseWriter(new AnswerWriter(req, res), 'run-1', 50, metrics)
      const big = 'x'.repeat(64 * 1024)
      // fill the socket and the response's own buffer (the caller reads nothing yet): write until
      // a 'drain' does not come within 200 ms
      void (async () => {
        for (;;) {
          if (!writer.event(big)) {
            const drained = await Promise.race([once(res, 'drain').then(() => true), sleep(200).then(() => false)])
            if (!drained) break
          }
        }
        if (how === 'end') writer.end()
        else writer.fail('app failed mid-stream: test')
        ended()
      })()
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    t.teardown(() => { server.closeAllConnections(); server.close() })
    const socket = connect((server.address() as AddressInfo).port, '127.0.0.1')
    socket.pause()
    socket.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n')
    await endedP
    t.equal(response?.writableEnded, true)
    t.equal(response?.writableFinished, false, 'bytes still wait for the caller')
    await sleep(300) // six heartbeat periods: the timer fires in silence, so only time shows it writes nothing
    let tail = Buffer.alloc(0)
    socket.on('data', (chunk: Buffer) => { tail = Buffer.concat([tail.subarray(-200), chunk]) })
    socket.resume()
    await closed
    await sleep(100) // more heartbeat periods after 'close'
    socket.destroy()
    t.same(errors, [], 'nothing written after the end')
    const text = tail.toString('latin1')
    t.ok(text.endsWith('0\r\n\r\n'), 'the chunked body ended properly')
    if (how === 'fail') t.match(text, /event: error\ndata: \{"message":"app failed mid-stream: test"\}\n\n\r\n0\r\n\r\n$/)
    t.equal((await metrics.sseStreams.get()).values[0]?.value, 0, 'the stream gauge is back to 0')
  })
}
