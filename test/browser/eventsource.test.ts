import t, { type Test } from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { findChromium, type HeadlessChromium, openInChromium } from '../helpers/chromium.ts'
import { runsClient } from '../helpers/runs-client.ts'
import { eventually, type Harness, sidecarFor, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'

// Issue 28, with a real browser: docs/routes.md, "Streams": a reconnecting EventSource never runs
// a plain call twice. Chromium's EventSource keeps the id of the id-only frame `id: <run_id>.done`
// that ends a converted stream (WHATWG), reconnects once with it, gets the sidecar's 204 and stops
// (CLOSED); likewise after the run events route's `done` event. The page is served by the app
// through the sidecar (RUNTIME=custom: unchanged), so its EventSource is same-origin; when the
// EventSource is CLOSED it reports what it saw to the app, which is the event the test waits for.

/** What the page saw: each event as [type, data, lastEventId], and readyState at each error. */
interface Seen { events: Array<[string, string, string]>, errors: number[] }

/** Opens an EventSource on `?src=`, and once it is CLOSED reports what it saw to `report` (relative: the same app). */
const PAGE = `<!doctype html>
<meta charset="utf-8">
<title>EventSource</title>
<script>
const seen = { events: [], errors: [] }
const es = new EventSource(new URLSearchParams(location.search).get('src'))
const keep = e => { seen.events.push([e.type, e.data, e.lastEventId]) }
es.onmessage = keep
es.addEventListener('done', keep)
es.onerror = () => {
  seen.errors.push(es.readyState)
  if (es.readyState === EventSource.CLOSED) fetch('report?seen=' + encodeURIComponent(JSON.stringify(seen)))
}
</script>
`

/** EventSource.CONNECTING and EventSource.CLOSED (WHATWG). */
const EVENTSOURCE_CONNECTING = 0
const EVENTSOURCE_CLOSED = 2

/** How long Chromium may take to start, load the page, wait out its reconnection delay (3 s) and report. */
const REPORT_MS = 20_000

interface BrowserApp {
  readonly app: TestServer
  readonly h: Harness
  /** How many requests the app got for `path` (query aside). */
  calls: (path: string) => number
  /** Opens the page in Chromium with its EventSource on `src`, and waits for its report. */
  watch: (src: string) => Promise<Seen>
}

/**
 * An app serving the page, `/report`, and `/stream` and `/job` (NDJSON, 3 lines: 1, 2, 3); a
 * sidecar before it (auth off, RUNTIME=custom). Undefined when there is no Chromium (see findChromium).
 */
async function browserApp (t: Test): Promise<BrowserApp | undefined> {
  const chromium = findChromium(t)
  if (chromium === undefined) return undefined
  const reports: Seen[] = []
  const app = await startTestServer((req, res) => {
    const url = new URL(req.url as string, 'http://app')
    if (url.pathname === '/page.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE)
    } else if (url.pathname === '/stream' || url.pathname === '/job') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('1\n2\n3\n')
    } else if (url.pathname === '/report') {
      reports.push(JSON.parse(url.searchParams.get('seen') as string) as Seen)
      // 200, not 204: the sidecar's 204 is the only one the test counts
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok')
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('no route')
    }
  })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom' })
  const calls = (path: string): number => app.requests.filter(r => r.url.split('?')[0] === path).length
  const watch = async (src: string): Promise<Seen> => {
    const browser: HeadlessChromium = await openInChromium(t, chromium, `${h.base}/v4/proj/app/page.html?src=${encodeURIComponent(src)}`)
    await eventually(() => reports.length > 0, REPORT_MS).catch(() => {
      const seen = app.requests.map(r => `${r.method} ${r.url}`).join(', ')
      throw new Error(`no report from the page in ${REPORT_MS} ms; the app saw: ${seen}; chromium: ${browser.output()}`)
    })
    return reports[0] as Seen
  }
  return { app, h, calls, watch }
}

/** The statuses of the sidecar's log lines for `path`, once there are `n`. */
async function statusesOf (h: Harness, path: string, n: number): Promise<unknown[]> {
  const lines = (): unknown[] => h.logs.filter(line => line.path === path).map(line => line.status)
  await eventually(() => lines().length >= n)
  return lines()
}

t.test('Chromium on a plain NDJSON call: 3 events, one reconnect answered 204, CLOSED; the app ran once', async t => {
  const b = await browserApp(t)
  if (b === undefined) return
  const seen = await b.watch('/v4/proj/app/stream')
  t.same(seen.events, [['message', '1', ''], ['message', '2', ''], ['message', '3', '']], 'the 3 events, in order (the done frame dispatches none)')
  t.same(seen.errors, [EVENTSOURCE_CONNECTING, EVENTSOURCE_CLOSED], 'the end of the stream (it reconnects), then the 204 (it stops)')
  t.equal(b.calls('/stream'), 1, 'the app ran the call once')
  t.same(await statusesOf(b.h, '/v4/proj/app/stream', 2), [200, 204], 'the call, then the reconnect answered 204 by the sidecar')
  t.equal(await metric(b.h, 'sidecar_requests_total', { route: 'invoke', code: '204' }), 1, 'one 204 on route invoke')
  t.equal(b.calls('/report'), 1)
})

t.test('Chromium on the events of a finished async run: the events and done, one reconnect answered 204, CLOSED; the run ran once', async t => {
  const b = await browserApp(t)
  if (b === undefined) return
  const client = runsClient({ base: b.h.base, project: 'proj', app: 'app' })
  t.equal((await client.submit('/job', 'browser-run')).status, 202)
  const { record, response } = await client.finished('browser-run')
  t.equal(record.status, 'succeeded')
  const seen = await b.watch('/v4/proj/app/_runs/browser-run/events')
  t.same(seen.events, [['message', '1', '0'], ['message', '2', '1'], ['message', '3', '2'], ['done', response.text, 'browser-run.done']],
    'the events, then done with the record and the done id')
  t.same(seen.errors, [EVENTSOURCE_CONNECTING, EVENTSOURCE_CLOSED], 'the end of the stream (it reconnects), then the 204 (it stops)')
  t.equal(b.calls('/job'), 1, 'the run ran once')
  t.same(await statusesOf(b.h, '/v4/proj/app/_runs/browser-run/events', 2), [200, 204], 'the events, then the reconnect answered 204')
  t.equal(await metric(b.h, 'sidecar_requests_total', { route: 'invoke', code: '204' }), 1, 'one 204 on route invoke')
})
