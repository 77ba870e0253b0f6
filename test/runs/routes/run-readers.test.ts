import { request, type ClientRequest, type IncomingMessage } from 'node:http'
import t from 'tap'
import { Listening } from '../../../src/runs/store/redis/redis-follow.ts'
import { send } from '../../helpers/http-client.ts'
import { testRedis } from '../../helpers/redis-server.ts'
import { runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// docs/configuration.md, "Sidecar (`app-sidecar`)", RUN_MAX_READERS (1000): most readers of run
// events this replica serves at once; beyond it 503 with Retry-After. Each reader's buffer is
// bounded in bytes too: one that does not read catches up from the kept events.

/** A reader of `url` that reads nothing once its headers arrived (a paused EventSource, a stalled client). */
interface PausedReader { req: ClientRequest, res: IncomingMessage }

async function pausedReader (url: string): Promise<PausedReader> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { agent: false }, res => {
      res.pause()
      resolve({ req, res })
    })
    req.on('error', reject)
    req.end()
  })
}

/** A reader's answer: a stream (200) is cut at once, anything else read whole. */
async function readerAnswer (url: string, headers: Record<string, string> = {}): Promise<{ status: number, headers: IncomingMessage['headers'], text: string }> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { headers, agent: false }, res => {
      if (res.statusCode === 200) {
        req.destroy()
        resolve({ status: 200, headers: res.headers, text: '' })
        return
      }
      let text = ''
      res.setEncoding('utf8').on('data', (chunk: string) => { text += chunk }).on('end', () => { resolve({ status: res.statusCode ?? 0, headers: res.headers, text }) })
    })
    req.on('error', reject)
    req.end()
  })
}

t.test('the 1001st reader gets 503 with Retry-After; a reader leaving makes room; other routes are not counted', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/ndjson', 'watched')).status, 202)
  const held = await app.waitForHeld(1)
  held.res.write('{"n":0}\n')
  const url = client.runUrl('watched', '/events')
  const readers: PausedReader[] = []
  t.teardown(() => { for (const reader of readers) reader.req.destroy() })
  for (let batch = 0; batch < 10; batch++) {
    readers.push(...await Promise.all(Array.from({ length: 100 }, async () => await pausedReader(url))))
  }
  t.same([...new Set(readers.map(reader => reader.res.statusCode))], [200], '1000 readers served')

  const refused = await readerAnswer(url, { 'x-request-id': 'reader-1001' })
  t.equal(refused.status, 503, 'the 1001st')
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.headers['x-request-id'], 'reader-1001')
  t.equal(refused.text, '{"message":"too many readers of run events"}')
  t.equal((await send(client.runUrl('watched'))).status, 200, 'the record is no reader')
  t.equal((await readerAnswer(client.runUrl('nobody', '/events'))).status, 503, 'refused before the run is even looked up')

  readers.pop()?.req.destroy()
  let again: PausedReader | undefined
  await eventually(async () => {
    again?.req.destroy()
    again = await pausedReader(url)
    return again.res.statusCode === 200
  })
  again?.req.destroy()

  held.res.end('{"n":1}\n')
  const readersLeft = readers.splice(0)
  for (const reader of readersLeft) reader.req.destroy()
  await eventually(async () => (await send(url)).status === 200, 10_000)
})

t.test('RUN_MAX_READERS is the bound: readers of any run count, finished readers free their place', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUN_MAX_READERS: '2' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/ndjson', 'one')).status, 202)
  t.equal((await client.submit('/json', 'two')).status, 202)
  await client.finished('two')
  const held = await app.waitForHeld(1)
  const first = await pausedReader(client.runUrl('one', '/events'))
  t.teardown(() => { first.req.destroy() })
  for (let i = 0; i < 5; i++) t.equal((await send(client.runUrl('two', '/events'))).status, 200, 'a reader that ends frees its place')
  const second = await pausedReader(client.runUrl('one', '/events'))
  t.teardown(() => { second.req.destroy() })
  t.equal((await readerAnswer(client.runUrl('two', '/events'))).status, 503, 'two readers of another run hold both places')
  held.res.end()
})

t.test('a paused Redis follower keeps at most 1 MiB of live events: past it, it catches up from the kept events', async t => {
  const listening = new Listening(new AbortController().signal, () => {})
  const data = 'x'.repeat(64 * 1024)
  let most = 0
  for (let n = 0; n < 2000; n++) {
    listening.push(`${n}\n${data}`)
    let bytes = 0
    for (const event of listening.pending) bytes += event.data.length
    most = Math.max(most, bytes)
  }
  t.ok(most <= 1024 * 1024, `at most 1 MiB held (${most} bytes at most)`)
  t.equal(listening.stale, true, 'it reads the kept events instead')
  t.equal(listening.pendingBytes, listening.pending.reduce((sum, event) => sum + event.data.length, 0), 'its count is exact')
  listening.shift()
  t.equal(listening.pendingBytes, listening.pending.reduce((sum, event) => sum + event.data.length, 0), 'as events are taken')
})

t.test('on Redis, a reader paused through 16 MiB of large events then reads them all, in order', async t => {
  const url = await testRedis(t)
  if (url === undefined) return
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUN_STORE_URL: url, PROJECT_ID: 'p', APP_NAME: 'a' })
  const client = runsClient({ base: h.base })
  // a first event loads the store's Lua script: a burst of appends racing its first load can lose
  // events (NOSCRIPT retries reorder them; a run store matter, not this test's)
  t.equal((await client.submit('/ndjson', 'warm-up')).status, 202)
  const warm = await app.waitForHeld(1)
  warm.res.end('{"warm":true}\n')
  await client.finished('warm-up')
  t.equal((await client.submit('/ndjson', 'large-events')).status, 202)
  const held = await app.waitForHeld(2)
  const reader = await pausedReader(client.runUrl('large-events', '/events'))
  t.teardown(() => { reader.req.destroy() })
  const line = (n: number): string => `{"n":${n},"pad":"${String(n % 10).repeat(256 * 1024)}"}`
  for (let n = 0; n < 64; n++) held.res.write(line(n) + '\n')
  held.res.end()
  await client.finished('large-events', 30_000)
  const ids: number[] = []
  let rest = ''
  let wrong = 0
  reader.res.setEncoding('utf8')
  reader.res.on('data', (text: string) => {
    rest += text
    let end = rest.indexOf('\n\n')
    while (end !== -1) {
      const frame = rest.slice(0, end)
      rest = rest.slice(end + 2)
      const match = /^id: (\d+)\ndata: (.*)$/s.exec(frame)
      if (match !== null) {
        ids.push(Number(match[1]))
        if (match[2] !== line(Number(match[1]))) wrong++
      } else {
        ids.push(frame.startsWith('id: large-events.done\nevent: done\n') ? -1 : -2)
      }
      end = rest.indexOf('\n\n')
    }
  })
  reader.res.resume()
  await new Promise(resolve => reader.res.once('end', resolve))
  t.same(ids, [...Array.from({ length: 64 }, (_, n) => n), -1], 'every event once, in order, then done')
  t.equal(wrong, 0, 'each as the app wrote it')
})
