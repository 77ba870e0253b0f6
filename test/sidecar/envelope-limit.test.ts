import t from 'tap'
import { startHarness, startTestServer } from '../helpers/sidecar-harness.ts'

// ENVELOPE_MAX_BODY_BYTES: the cortex envelope must read a 2xx body whole, so one past the
// limit is answered 502 before more is buffered, and the app request is cut at once.

const LIMIT = 1024 * 1024
let appCut: Promise<boolean> = Promise.resolve(false)

const app = await startTestServer((req, res) => {
  const total = Number(new URL(req.url as string, 'http://x').searchParams.get('bytes'))
  appCut = new Promise(resolve => { res.once('close', () => { resolve(!res.writableFinished) }) })
  res.writeHead(200, { 'content-type': 'application/json' })
  const piece = Buffer.alloc(64 * 1024, 0x20) // JSON whitespace: the body stays valid JSON
  let sent = 0
  const pump = (): void => {
    while (sent < total - 2) {
      const n = Math.min(piece.length, total - 2 - sent)
      sent += n
      if (!res.write(piece.subarray(0, n))) { res.once('drain', pump); return }
    }
    res.end('{}')
  }
  pump()
})
const h = await startHarness(app.url, { DISABLE_AUTH: 'true', ENVELOPE_MAX_BODY_BYTES: String(LIMIT) })
t.teardown(async () => { await h.close(); await app.close() })

t.test('a body of exactly the limit is wrapped', async t => {
  const r = await fetch(`${h.base}/v4/p/a/run?bytes=${LIMIT}`, { headers: { 'x-request-id': 'at-limit' } })
  t.equal(r.status, 200)
  const body = await r.json() as { run_id: string, result: unknown }
  t.equal(body.run_id, 'at-limit')
  t.same(body.result, {})
})

t.test('one past it: 502 with a clear message, and the app request is cut', async t => {
  const r = await fetch(`${h.base}/v4/p/a/run?bytes=${8 * LIMIT}`, { headers: { 'x-request-id': 'over-limit' } })
  t.equal(r.status, 502)
  t.equal(r.headers.get('x-request-id'), 'over-limit')
  t.same(await r.json(), { message: `app unreachable: response body over ENVELOPE_MAX_BODY_BYTES (${LIMIT} bytes)` })
  t.equal(await appCut, true, 'the app\'s response was cut before it finished')
  const line = h.logs.find(line => line.runId === 'over-limit' && line.msg === 'request')
  t.match(line, { status: 502, error: 'SIDECAR_APP_UNREACHABLE' })
})

t.test('RUNTIME=custom passes a large body through untouched', async t => {
  const custom = await startHarness(app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom', ENVELOPE_MAX_BODY_BYTES: String(LIMIT) })
  t.teardown(() => custom.close())
  const r = await fetch(`${custom.base}/v4/p/a/run?bytes=${2 * LIMIT}`)
  t.equal(r.status, 200)
  t.equal((await r.arrayBuffer()).byteLength, 2 * LIMIT)
})
