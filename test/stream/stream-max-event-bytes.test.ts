import { once } from 'node:events'
import { request, type ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { send } from '../helpers/http-client.ts'
import { startPrivateRedis } from '../helpers/redis-server.ts'
import { receiverFor, runsClient, type RunsClient } from '../helpers/runs-client.ts'
import { eventually, sidecarFor, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { startSidecarProcess } from '../helpers/sidecar-process.ts'

// docs/configuration.md, "Sidecar (`app-sidecar`)", STREAM_MAX_EVENT_BYTES: the longest single
// event the sidecar assembles (an NDJSON line); a longer one ends the stream with `event: error`
// {"message": "event larger than <n> bytes"} and cuts the app request (a run so cut is failed,
// 502, with that error; its webhook reports the same); no event of any size may stop the process.

const MIB = 1024 * 1024
const DEFAULT_MAX = 16 * MIB
const TOO_LARGE = `event: error\ndata: {"message":"event larger than ${DEFAULT_MAX} bytes"}\n\n`

/** What the app did with one streamed request. */
interface BigLine {
  /** Bytes of the long line it wrote before it ended or was cut. */
  written: number
  /** Its response closed before it had written everything: the sidecar cut the request. */
  cut: boolean
  readonly closed: Promise<void>
}

/**
 * An app: `/big…` answers `contentType` with a first small event, then one line (or SSE data
 * field) of `lineBytes` written 1 MiB at a time as the sidecar reads it (never held whole), then a
 * last small event; `/small` answers one small NDJSON event.
 */
async function bigLineApp (t: Test, lineBytes: number, contentType = 'application/x-ndjson'): Promise<TestServer & { lines: BigLine[] }> {
  const lines: BigLine[] = []
  const sse = contentType === 'text/event-stream'
  const app = await startTestServer((req, res) => {
    if (!(req.url as string).startsWith('/big')) {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('{"small":true}\n')
      return
    }
    const line: BigLine = { written: 0, cut: false, closed: once(res, 'close').then(() => { line.cut = !res.writableFinished }) }
    lines.push(line)
    void writeBigLine(res, line, lineBytes, sse)
  })
  t.teardown(() => app.close())
  return Object.assign(app, { lines })
}

async function writeBigLine (res: ServerResponse, line: BigLine, lineBytes: number, sse: boolean): Promise<void> {
  const megabyte = Buffer.alloc(MIB, 'x')
  res.writeHead(200, { 'content-type': sse ? 'text/event-stream' : 'application/x-ndjson' })
  res.write(sse ? 'data: {"n":1}\n\ndata: "' : '{"n":1}\n"')
  while (line.written < lineBytes && !res.destroyed) {
    line.written += MIB
    if (!res.write(megabyte)) await Promise.race([once(res, 'drain'), line.closed])
  }
  if (!res.destroyed) res.end(sse ? '"\n\ndata: {"n":2}\n\n' : '"\n{"n":2}\n')
}

/** A caller reading a whole SSE answer without keeping it: its status, byte count, first and last bytes. */
async function readStream (url: string, headers: Record<string, string> = {}, method = 'GET'): Promise<{ status: number, bytes: number, head: string, tail: string }> {
  return await new Promise((resolve, reject) => {
    const req = request(url, { method, headers, agent: false }, res => {
      let bytes = 0
      let head = Buffer.alloc(0)
      let tail = Buffer.alloc(0)
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length
        if (head.length < 4096) head = Buffer.concat([head, chunk]).subarray(0, 4096)
        tail = Buffer.concat([tail, chunk]).subarray(-4096)
      })
      res.on('error', reject)
      res.on('close', () => { resolve({ status: res.statusCode ?? 0, bytes, head: head.toString('latin1'), tail: tail.toString('latin1') }) })
    })
    req.on('error', reject)
    req.end()
  })
}

/** The async run's end, as its record, its webhook and its events tell it; then a second call works. */
async function expectRunFailed (t: Test, client: RunsClient, runId: string, receiver: Awaited<ReturnType<typeof receiverFor>>): Promise<void> {
  const { record } = await client.finished(runId, 60_000)
  t.equal(record.status, 'failed')
  t.equal(record.status_code, 502)
  t.same(record.error, { message: `event larger than ${DEFAULT_MAX} bytes` })
  t.same(record.result, { message: `event larger than ${DEFAULT_MAX} bytes` })
  const [hook] = await receiver.waitForAttempts(1, 30_000)
  const body = JSON.parse(hook?.body.toString() ?? '') as Record<string, unknown>
  t.equal(body.status_code, 502, 'the webhook reports the 502')
  t.same(body.result, { message: `event larger than ${DEFAULT_MAX} bytes` })
  const events = await send(client.runUrl(runId, '/events'))
  const head = `id: 0\ndata: {"n":1}\n\nid: ${runId}.done\nevent: done\n`
  t.equal(events.text.slice(0, head.length), head, 'the events: the first one, then the end')
  const second = await client.call('/small', { method: 'GET' })
  t.equal(second.status, 200, 'the process lives: a second call works')
  t.match(second.text, /^data: \{"small":true\}\n\n/)
}

t.test('sync: a 300 MiB NDJSON line ends the stream with the error event and cuts the app request', async t => {
  const app = await bigLineApp(t, 300 * MIB)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const read = await readStream(`${h.base}/v4/proj/app/big`)
  t.equal(read.status, 200)
  t.ok(read.bytes < 1024, `none of the long line reached the caller (${read.bytes} bytes in all)`)
  t.ok(read.head.startsWith('data: {"n":1}\n\n' + TOO_LARGE), `the first event, then the error event: ${JSON.stringify(read.tail.slice(-200))}`)
  const [line] = app.lines
  await line?.closed
  t.ok(line?.cut, 'the app request was cut')
  t.ok((line?.written ?? 0) < 64 * MIB, `the app wrote ${(line?.written ?? 0) / MIB} MiB of its 300 before the cut`)
  const second = await send(`${h.base}/v4/proj/app/small`)
  t.match(second.text, /^data: \{"small":true\}\n\n/, 'a second call works')
})

t.test('async on the memory store: a 300 MiB NDJSON line fails the run, 502, with that error, and its webhook says the same', async t => {
  const app = await bigLineApp(t, 300 * MIB)
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base })
  const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
  t.equal((await client.submit(`/big?${hook}`, 'big-memory')).status, 202)
  await expectRunFailed(t, client, 'big-memory', receiver)
  await app.lines[0]?.closed
  t.ok(app.lines[0]?.cut, 'the app request was cut')
})

t.test('async on Redis: a 300 MiB NDJSON line fails the run and the sidecar process lives', async t => {
  const redis = await startPrivateRedis(t)
  const app = await bigLineApp(t, 300 * MIB)
  const receiver = await receiverFor(t)
  const sidecar = await startSidecarProcess(t, {
    APP_URL: app.url, DISABLE_AUTH: 'true', RUN_STORE_URL: redis.url, PROJECT_ID: 'p', APP_NAME: 'a', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8'
  })
  const client = runsClient({ base: sidecar.base })
  const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
  t.equal((await client.submit(`/big?${hook}`, 'big-redis')).status, 202)
  await eventually(() => app.lines[0] !== undefined)
  await app.lines[0]?.closed
  t.ok(sidecar.running(), `the process lives; stderr: ${sidecar.child.stderr.slice(0, 2000)}`)
  await expectRunFailed(t, client, 'big-redis', receiver)
  t.ok(app.lines[0]?.cut, 'the app request was cut')
  t.ok(sidecar.running())
})

t.test('an SSE event over the bound, a recorded run and a sync webhook: the same end', async t => {
  const max = 65_536
  const message = `{"message":"event larger than ${max} bytes"}`
  const app = await bigLineApp(t, 4 * MIB, 'text/event-stream')
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', STREAM_MAX_EVENT_BYTES: String(max), WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base })
  const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
  const read = await readStream(`${h.base}${client.prefix}/big?${hook}`, { 'idempotency-key': 'k1', 'x-request-id': 'recorded-big' }, 'POST')
  t.ok(read.head.startsWith('data: {"n":1}\n\n'), 'the first event went out as the app sent it')
  t.ok(read.tail.includes(`\n\nevent: error\ndata: ${message}\n\n`), `then the error event, last: ${JSON.stringify(read.tail.slice(-120))}`)
  t.ok(read.bytes < max + 1024, `at most the bound of the long event went out (${read.bytes} bytes)`)
  const [sent] = await receiver.waitForAttempts(1)
  const body = JSON.parse(sent?.body.toString() ?? '') as Record<string, unknown>
  t.equal(body.status_code, 502, 'the webhook reports the 502')
  t.equal(JSON.stringify(body.result), message)
  const { record } = await client.finished('recorded-big')
  t.equal(record.status, 'failed', 'the recorded run failed')
  t.equal(record.status_code, 502)
  t.equal(JSON.stringify(record.error), message)

  t.equal((await client.submit('/big', 'async-sse')).status, 202)
  const run = (await client.finished('async-sse')).record
  t.same([run.status, run.status_code, JSON.stringify(run.error)], ['failed', 502, message], 'an async run of an SSE answer too')
  t.ok(app.lines.every(line => line.cut), 'every app request was cut')
})
