import { ServerResponse } from 'node:http'
import t from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { eventually, type Harness, startHarness } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'
import { doneFrame, MODES, type Mode, openStream, play, readStream, type ScriptedApp, startScriptedApp, type Step } from './sse-test-kit.ts'

// docs/routes.md, "Streams": the two converted SSE rows (NDJSON, chunked) end, after their last
// event (an `event: error` included, whatever ended the stream, unless the caller left), with one
// frame `id: <run_id>.done` and a blank line; passthrough SSE is the app's own stream, unchanged.

let app: ScriptedApp
let h: Harness
let late: Harness
const DEADLINE = 0.5

t.before(async () => {
  app = await startScriptedApp()
  h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  late = await startHarness(app.url, { DISABLE_AUTH: 'true', DEADLINE_SECONDS: String(DEADLINE) })
})
t.teardown(async () => {
  await h.close()
  await late.close()
  await app.close()
})

type TestLike = Parameters<ScriptedApp['route']>[0]
const headersFor = (mode: Mode, runId: string): Record<string, string> =>
  ({ 'x-request-id': runId, ...(mode.accept === undefined ? {} : { accept: mode.accept }) })
/** What the caller reads for app units `values`: the app's bytes (passthrough), else one `data:` event each. */
const eventsOf = (mode: Mode, values: string[]): string => values.map(v => `data: ${v}\n\n`).join('')
/** The end of a stream of run `runId` in `mode`: the done frame for a converted one, nothing for passthrough. */
const endOf = (mode: Mode, runId: string): string => mode.converted ? doneFrame(runId) : ''
const endNamed = (mode: Mode): string => mode.converted ? 'then the done frame' : 'no frame'

/** An app route that plays `steps`, then ends (`end`), kills its connection (`die`), or holds until the sidecar cuts it (`hold`). */
const scripted = (t: TestLike, mode: Mode, steps: Step[], then: 'end' | 'die' | 'hold'): string =>
  app.route(t, async (req, res) => {
    res.writeHead(200, mode.headers)
    res.flushHeaders()
    await play(res, steps)
    if (then === 'end') res.end()
    else if (then === 'die') { await sleep(50); req.socket.destroy() }
  })

for (const mode of MODES) {
  t.test(`${mode.name}: the end of a stream the app ended, byte for byte: its events, ${endNamed(mode)}`, async t => {
    const runId = `ended-${mode.name}`
    const path = scripted(t, mode, [mode.unit('1'), 30, mode.unit('{"n":2}')], 'end')
    const s = await readStream(`${h.base}/v4/proj/app${path}`, headersFor(mode, runId))
    t.equal(s.status, 200)
    t.equal(s.raw(), eventsOf(mode, ['1', '{"n":2}']) + endOf(mode, runId))
    t.ok(s.res.complete, 'the chunked body ended properly')
    t.same(s.events.map(e => [e.id, e.event, e.data]), [[undefined, undefined, '1'], [undefined, undefined, '{"n":2}']],
      'the frame dispatches no event, and the events carry no id')
  })

  t.test(`${mode.name}: the end of a stream whose app died, byte for byte: the error event, ${endNamed(mode)}`, async t => {
    const runId = `died-${mode.name}`
    const path = scripted(t, mode, [mode.unit('1')], 'die')
    const s = await readStream(`${h.base}/v4/proj/app${path}`, headersFor(mode, runId))
    const error = s.events[1]
    t.match(error, { event: 'error', data: /^\{"message":"app failed mid-stream: [^"\n]+"\}$/ })
    t.equal(s.raw(), eventsOf(mode, ['1']) + `event: error\ndata: ${error?.data ?? ''}\n\n` + endOf(mode, runId))
    t.equal(s.events.length, 2)
  })

  t.test(`${mode.name}: the end of a stream past DEADLINE_SECONDS, byte for byte: the error event, ${endNamed(mode)}`, async t => {
    const runId = `late-${mode.name}`
    const path = scripted(t, mode, [mode.unit('1')], 'hold')
    const s = await readStream(`${late.base}/v4/proj/app${path}`, headersFor(mode, runId))
    t.equal(s.raw(), eventsOf(mode, ['1']) +
      `event: error\ndata: {"message":"request exceeded its deadline of ${DEADLINE}s"}\n\n` + endOf(mode, runId))
    t.ok(s.res.complete, 'the stream was ended properly, not cut')
  })
}

t.test('a caller that left is written no frame (NDJSON, chunks)', async t => {
  // every write the sidecar makes to a response, by the run id: what the caller would have got
  const written = new Map<string, string[]>()
  const sidecarHost = new URL(h.base).host
  const note = (res: ServerResponse, chunk: unknown): void => {
    if (res.req.headers.host !== sidecarHost) return // the app's own responses run in this process too
    const runId = res.req.headers['x-request-id'] // the caller's, kept as the run id
    if (typeof runId !== 'string' || !runId.startsWith('left-') || (typeof chunk !== 'string' && !Buffer.isBuffer(chunk))) return
    written.set(runId, [...written.get(runId) ?? [], chunk.toString()])
  }
  const proto = ServerResponse.prototype as unknown as Record<'write' | 'end', (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) => unknown>
  const { write, end } = proto
  proto.write = function (chunk, ...rest) { note(this, chunk); return write.call(this, chunk, ...rest) }
  proto.end = function (chunk, ...rest) { note(this, chunk); return end.call(this, chunk, ...rest) }
  t.teardown(() => { proto.write = write; proto.end = end })

  for (const mode of MODES.filter(m => m.converted)) {
    const runId = `left-${mode.name}`
    let cut = false
    const path = app.route(t, async (_req, res) => {
      res.once('close', () => { cut = !res.writableFinished })
      res.writeHead(200, mode.headers)
      for (let i = 0; !res.destroyed; i++) {
        res.write(mode.unit(`{"tick":${i}}`))
        await sleep(30)
      }
    })
    const s = await openStream(`${h.base}/v4/proj/app${path}`, headersFor(mode, runId))
    await s.waitForEvents(2)
    s.req.destroy()
    await eventually(() => cut) // the relay handled the abort before the app saw its request cut
    await eventually(() => h.logs.some(line => line.runId === runId))
    await eventually(async () => await metric(h, 'sidecar_sse_streams') === 0)
    const out = (written.get(runId) ?? []).join('')
    t.ok(out.startsWith('data: {"tick":0}\n\ndata: {"tick":1}\n\n'), `${mode.name}: the events were written`)
    t.notOk(out.includes('.done'), `${mode.name}: no done frame`)
    t.notOk(out.includes('event: error'), `${mode.name}: nor an error event`)
    t.match(h.logs.filter(line => line.runId === runId), [{ status: 200, aborted: true }])
  }
})
