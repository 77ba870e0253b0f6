import t, { type Test } from 'tap'
import { findChromium, openInChromium } from '../helpers/chromium.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, sidecarFor, startTestServer, type TestHandler, type TestServer } from '../helpers/sidecar-harness.ts'

// Issue 32, with a real browser: docs/routes.md, "CORS: browser pages on other origins". A page
// served from another origin (its own server, another port) calls the sidecar with fetch and an
// Authorization header: Chromium sends the preflight, the sidecar answers it (no token needed),
// and the page reads the app's answer and X-Request-Id; it reads the sidecar's own 401 too. A
// sidecar that does not allow the page's origin is blocked by the browser: its preflight gets 403
// and the call never reaches the app.

/** What the page saw for each of its fetches: the status and what it could read, or the error fetch threw. */
interface Outcome { status?: number, requestId?: string | null, serverTiming?: string | null, body?: unknown, error?: string }
type Report = Record<string, Outcome>

/**
 * Runs the fetches named in `?steps=` (JSON: name → {url, method, headers, body}) one after the
 * other, then reports what each gave to its own origin's /report.
 */
const PAGE = `<!doctype html>
<meta charset="utf-8">
<title>CORS</title>
<script type="module">
const steps = JSON.parse(new URLSearchParams(location.search).get('steps'))
const report = {}
for (const [name, step] of Object.entries(steps)) {
  try {
    const r = await fetch(step.url, { method: step.method, headers: step.headers, body: step.body })
    report[name] = { status: r.status, requestId: r.headers.get('x-request-id'), serverTiming: r.headers.get('server-timing'), body: await r.json() }
  } catch (e) {
    report[name] = { error: e.name + ': ' + e.message }
  }
}
await fetch('/report', { method: 'POST', body: JSON.stringify(report) })
</script>
`

/** Opens an EventSource on `?src=` (another origin), and once it is CLOSED reports what it saw to its own origin. */
const EVENTSOURCE_PAGE = `<!doctype html>
<meta charset="utf-8">
<title>EventSource across origins</title>
<script>
const seen = { events: [], errors: [] }
const es = new EventSource(new URLSearchParams(location.search).get('src'))
es.onmessage = e => { seen.events.push([e.data, e.lastEventId]) }
es.onerror = () => {
  seen.errors.push(es.readyState)
  if (es.readyState === EventSource.CLOSED) fetch('/report', { method: 'POST', body: JSON.stringify(seen) })
}
</script>
`

/** How long Chromium may take to start, load the page, run its fetches (an EventSource: wait out its 3 s reconnection delay) and report. */
const REPORT_MS = 20_000

const app: TestHandler = (req, res, body) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ method: req.method, got: body.toString('utf8') }))
}

/** A site on its own origin serving the pages, and the reports they send back. */
async function startSite (t: Test): Promise<{ site: TestServer, reports: unknown[] }> {
  const reports: unknown[] = []
  const site = await startTestServer((req, res, body) => {
    const path = (req.url as string).split('?')[0]
    if (path === '/page.html' || path === '/es.html') {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(path === '/page.html' ? PAGE : EVENTSOURCE_PAGE)
    } else if (path === '/report') {
      reports.push(JSON.parse(body.toString('utf8')))
      res.writeHead(204).end()
    } else {
      res.writeHead(404).end()
    }
  })
  t.teardown(() => site.close())
  return { site, reports }
}

/** Opens `url` in Chromium and waits for the page's report. */
async function reportOf (t: Test, chromium: string, site: TestServer, reports: unknown[], url: string): Promise<unknown> {
  const browser = await openInChromium(t, chromium, url)
  await eventually(() => reports.length > 0, REPORT_MS).catch(() => {
    throw new Error(`no report from the page in ${REPORT_MS} ms; the site saw: ${site.requests.map(r => r.url).join(', ')}; chromium: ${browser.output()}`)
  })
  return reports[0]
}

t.test('Chromium on another origin: fetch with Authorization reads the answer and X-Request-Id; an origin not allowed is blocked', async t => {
  const chromium = findChromium(t)
  if (chromium === undefined) return
  const { site, reports } = await startSite(t)
  const pageOrigin = site.url // http://127.0.0.1:<its port>: another origin than either sidecar's

  const allowingApp = await startTestServer(app)
  t.teardown(() => allowingApp.close())
  const allowing = await sidecarFor(t, allowingApp.url, { CORS_ALLOWED_ORIGINS: `https://elsewhere.example,${pageOrigin}` })
  const refusingApp = await startTestServer(app)
  t.teardown(() => refusingApp.close())
  const refusing = await sidecarFor(t, refusingApp.url, { CORS_ALLOWED_ORIGINS: 'https://elsewhere.example' })
  for (const h of [allowing, refusing]) await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)

  const auth = { authorization: `Bearer ${await allowing.token()}`, 'content-type': 'application/json', 'x-request-id': 'from-the-page' }
  const steps = {
    call: { url: `${allowing.base}/v4/proj/app/predict`, method: 'POST', headers: auth, body: '{"name":"Ada"}' },
    noToken: { url: `${allowing.base}/v4/proj/app/predict`, method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' },
    refused: { url: `${refusing.base}/v4/proj/app/predict`, method: 'POST', headers: { ...auth, authorization: `Bearer ${await refusing.token()}` }, body: '{}' },
    // a simple GET needs no preflight: the sidecar answers it (401, no token), but the page may not read that
    refusedSimple: { url: `${refusing.base}/v4/proj/app/simple`, method: 'GET' }
  }
  const report = await reportOf(t, chromium, site, reports, `${site.url}/page.html?steps=${encodeURIComponent(JSON.stringify(steps))}`) as Report

  const call = report.call as Outcome
  t.equal(call.status, 200, 'the page read the answer')
  t.equal(call.requestId, 'from-the-page', 'and X-Request-Id (exposed)')
  t.match(call.serverTiming, /^queue;dur=[\d.]+, app;dur=[\d.]+$/, 'and Server-Timing (exposed)')
  t.match(call.body, { run_id: 'from-the-page', result: { method: 'POST', got: '{"name":"Ada"}' } }, 'the cortex envelope')
  t.equal(allowingApp.requests.length, 1, 'the app got the call once: the preflight never reached it')
  t.equal(allowingApp.requests[0]?.headers.authorization, undefined, 'the checked token does not reach the app')

  const noToken = report.noToken as Outcome
  t.equal(noToken.status, 401, 'the sidecar\'s own 401 is readable')
  t.same(noToken.body, { message: 'missing bearer token' })
  t.match(noToken.requestId, /^[0-9a-f-]{36}$/)

  const preflights = allowing.logs.filter(line => line.method === 'OPTIONS')
  t.match(preflights, [{ path: '/v4/proj/app/predict', status: 204 }], 'Chromium preflighted once (it caches the answer for Max-Age)')

  t.same(report.refused, { error: 'TypeError: Failed to fetch' }, 'the browser blocks the call from an origin not allowed')
  t.same(report.refusedSimple, { error: 'TypeError: Failed to fetch' }, 'and the answer to a simple GET (no CORS header on it)')
  t.match(refusing.logs.filter(line => line.msg === 'request'), [
    { method: 'OPTIONS', path: '/v4/proj/app/predict', status: 403, error: 'SIDECAR_ORIGIN_NOT_ALLOWED' },
    { method: 'GET', path: '/v4/proj/app/simple', status: 401 }
  ], 'its preflight got 403 (so the POST was never sent); the simple GET was answered, unread')
  t.equal(refusingApp.requests.length, 0, 'nothing reached its app')
})

t.test('Chromium on another origin: an EventSource (access_token) gets its events, and its reconnect the 204 that stops it', async t => {
  const chromium = findChromium(t)
  if (chromium === undefined) return
  const { site, reports } = await startSite(t)
  const app = await startTestServer((_req, res) => { res.writeHead(200, { 'content-type': 'application/x-ndjson' }).end('1\n2\n3\n') })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { CORS_ALLOWED_ORIGINS: site.url, ALLOW_QUERY_TOKEN: 'true' })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const src = `${h.base}/v4/proj/app/stream?access_token=${await h.token()}`
  const seen = await reportOf(t, chromium, site, reports, `${site.url}/es.html?src=${encodeURIComponent(src)}`) as { events: unknown[], errors: number[] }
  t.same(seen.events, [['1', ''], ['2', ''], ['3', '']], 'the 3 events, read across origins')
  t.same(seen.errors, [0, 2], 'the end of the stream (CONNECTING: it reconnects), then the 204 (CLOSED: it stops)')
  t.equal(app.requests.length, 1, 'the app ran the call once')
  t.match(h.logs.filter(line => line.msg === 'request'), [{ method: 'GET', status: 200 }, { method: 'GET', status: 204 }], 'no preflight: the call, then the reconnect')
})
