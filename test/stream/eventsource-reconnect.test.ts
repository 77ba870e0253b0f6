import t, { type Test } from 'tap'
import { EventSource, type FetchLike } from 'eventsource'
import { runsAppFor, runsClient, runsSidecarFor } from '../helpers/runs-client.ts'
import { eventually, type Harness } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'
import { openStream, type ScriptedApp, startScriptedApp } from './sse-test-kit.ts'

// Issue 28: an EventSource reconnects ~3 s after a clean end. docs/routes.md, "Streams": a
// reconnecting EventSource never runs a plain call twice: a converted stream ends with
// `id: <run_id>.done`, a GET with that Last-Event-ID is 204, and a 204 stops an EventSource. The
// run events route's done event carries the same id. The sidecar leaves `retry:` alone, so each
// test waits out the client's own reconnection delay and then for CLOSED, which proves it stopped.

/** One connection an EventSource made: the Last-Event-ID it sent, the status it got. */
interface Connection { lastEventId: string | undefined, status: number }

/** An EventSource on `url`, every connection it makes recorded (its fetch is the global one, watched). */
function watchedEventSource (url: string): { es: EventSource, connections: Connection[], messages: Array<[string, string, string]>, errorCodes: Array<number | undefined> } {
  const connections: Connection[] = []
  const messages: Array<[string, string, string]> = []
  const errorCodes: Array<number | undefined> = []
  const watched: FetchLike = async (input, init) => {
    const response = await fetch(input, init)
    connections.push({ lastEventId: init.headers['Last-Event-ID'], status: response.status })
    return response
  }
  const es = new EventSource(url, { fetch: watched })
  es.onmessage = e => { messages.push(['message', e.data as string, e.lastEventId]) }
  es.addEventListener('done', e => { messages.push(['done', e.data as string, e.lastEventId]) })
  es.onerror = e => { errorCodes.push(e.code) }
  return { es, connections, messages, errorCodes }
}

/** How long an EventSource may take to reconnect (its default delay is 3 s) and be answered. */
const RECONNECT_MS = 10_000

t.test('npm eventsource on the events of a finished run: one reconnect after done, answered 204, then CLOSED', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base, project: 'proj', app: 'app' })
  t.equal((await client.submit('/ndjson', 'es-run')).status, 202)
  const held = await app.waitForHeld(1)
  held.res.end('{"n":1}\n"two"\n')
  const { response } = await client.finished('es-run')

  const { es, connections, messages, errorCodes } = watchedEventSource(client.runUrl('es-run', '/events'))
  t.teardown(() => { es.close() })
  await eventually(() => es.readyState === es.CLOSED, RECONNECT_MS)
  t.same(messages, [['message', '{"n":1}', '0'], ['message', '"two"', '1'], ['done', response.text, 'es-run.done']], 'the events, then done')
  t.same(connections.map(c => [c.lastEventId, c.status]), [[undefined, 200], ['es-run.done', 204]], 'one reconnect, with the done id, answered 204')
  t.same(errorCodes, [undefined, 204], 'the end of the stream, then the 204 that stopped it')
  const lines = h.logs.filter(line => line.path === '/v4/proj/app/_runs/es-run/events')
  t.same(lines.map(line => line.status), [200, 204])
  t.equal(app.requestsTo('/ndjson').length, 1, 'the run ran once')
})

/** An app with two routes that answer `1`, `2` and end: as NDJSON, and as two plain chunks; and a sidecar before it. */
async function twoLineApp (t: Test): Promise<{ app: ScriptedApp, h: Harness, ndjson: string, chunks: string }> {
  const app = await startScriptedApp()
  t.teardown(() => app.close())
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const ndjson = app.route(t, (_req, res) => { res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('1\n2\n') })
  const chunks = app.route(t, async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('1')
    await sleep(20)
    res.end('2')
  })
  return { app, h, ndjson, chunks }
}

/**
 * The last event id an EventSource keeps after reading `raw`, by WHATWG's rule (what Chromium and
 * Firefox do): the id buffer is set by each `id:` field without NUL and becomes the last event id
 * at each blank line, whether or not the event had data (and so was dispatched).
 */
function whatwgLastEventId (raw: string): string {
  let buffer = ''
  let last = ''
  for (const line of raw.split(/\r\n|\r|\n/)) {
    if (line === '') {
      last = buffer
      continue
    }
    const colon = line.indexOf(':')
    const field = colon === -1 ? line : line.slice(0, colon)
    const value = colon === -1 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1))
    if (field === 'id' && !value.includes('\0')) buffer = value
  }
  return last
}

t.test('a browser EventSource on a plain NDJSON or chunked call: its reconnect carries <run_id>.done and gets 204; the app ran once', async t => {
  const { app, h, ndjson, chunks } = await twoLineApp(t)
  for (const path of [ndjson, chunks]) {
    const url = `${h.base}/v4/proj/app${path}`
    // what a browser's EventSource sends: Accept, and no other header it could set
    const first = await openStream(url, { accept: 'text/event-stream' })
    await first.done
    const runId = first.headers['x-request-id'] as string
    t.same(first.events.map(e => e.data), ['1', '2'], `${path}: the events`)
    t.equal(whatwgLastEventId(first.raw()), `${runId}.done`, `${path}: the last event id a browser keeps`)
    const again = await openStream(url, { accept: 'text/event-stream', 'last-event-id': whatwgLastEventId(first.raw()) })
    await again.done
    t.equal(again.status, 204, `${path}: the reconnect is 204, which stops an EventSource`)
    t.equal(again.raw(), '')
    t.equal(app.requests.filter(r => r.url === path).length, 1, `${path}: the app ran once`)
  }
})

// No npm eventsource test on a plain call: eventsource@4's parser drops the id-only done frame (fixed in eventsource@5, Node 22+); test/browser/ runs Chromium.
