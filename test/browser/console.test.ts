import t from 'tap'
import { consoleScene, rowCell } from '../helpers/console-page.ts'
import type { ChromiumPage } from '../helpers/chromium-page.ts'
import { runsClient } from '../helpers/runs-client.ts'

// Issue 42, in a real browser (docs/console.md): an operator signs in with the keyboard, sees runs
// appear and change status without a reload, follows a streaming run's events, cancels it (the
// app request is cut), purges the queue after a confirmation; sees each run's caller and urgency;
// at 390 and 1280 pixels wide nothing is wider than the window; and the page meets no CSP
// violation and throws nothing.

/** Presses Enter on the element `selector` (focused first, as Tab would): a keyboard user's click. */
async function activate (page: ChromiumPage, selector: string): Promise<void> {
  await page.evaluate(`document.querySelector(${JSON.stringify(selector)}).focus()`)
  await page.press('Enter')
}

/** Elements wider than the window, or reaching past its right edge (none may). */
const OVERFLOW = `(() => {
  const width = document.documentElement.clientWidth
  const out = [...document.querySelectorAll('body *')].filter(el => {
    const box = el.getBoundingClientRect()
    return box.width > 0 && box.right > width + 0.5
  }).map(el => el.tagName + (el.id ? '#' + el.id : '') + ' ' + Math.round(el.getBoundingClientRect().right))
  return { scrollWidth: document.scrollingElement.scrollWidth, innerWidth, out }
})()`

t.test('sign in by keyboard; runs appear and change status live; a streaming run\'s events; Cancel cuts the app request', async t => {
  const scene = await consoleScene(t)
  if (scene === undefined) return
  const { app, client, page } = scene
  await page.evaluate('window.sameDocument = true')

  t.equal((await client.submit('/ndjson/live', 'streaming-run')).status, 202)
  const stream = await app.waitForHeld(1)
  await scene.rowShows('streaming-run', 'running')
  t.equal((await client.submit('/json/next', 'queued-run')).status, 202)
  await scene.rowShows('queued-run', 'queued')
  t.same(await page.evaluate("[...document.querySelectorAll('#runs tbody tr')].map(row => row.dataset.runId)"), ['queued-run', 'streaming-run'], 'newest first')

  await activate(page, '#runs tr[data-run-id="streaming-run"] button')
  await page.waitFor("!document.getElementById('run').hidden && document.getElementById('run-id').textContent === 'streaming-run'", 'the run view')
  stream.res.write('{"step":1}\n')
  await page.waitFor("document.getElementById('run-events').textContent.includes('{\"step\":1}')", 'the first event')
  stream.res.write('{"step":2}\n')
  await page.waitFor("document.querySelectorAll('#run-events li').length === 2", 'the second event')
  t.same(await page.evaluate("[...document.querySelectorAll('#run-events li')].map(li => li.textContent)"), ['{"step":1}', '{"step":2}'], 'the events, in order')
  t.equal(await page.evaluate("document.getElementById('cancel').hidden"), false, 'Cancel is offered for a running run')

  await activate(page, '#cancel')
  await stream.cut
  t.ok(stream.wasCut(), 'the app request was aborted')
  await page.waitFor("document.getElementById('run-record').textContent.includes('\"status\": \"canceled\"')", 'the record, canceled')
  await page.waitFor("[...document.querySelectorAll('#run-events li')].some(li => li.textContent === 'done ')", 'the done event')
  t.equal(await page.evaluate("document.getElementById('cancel').hidden"), true, 'no Cancel for a finished run')
  await scene.rowShows('streaming-run', 'canceled')
  // the slot is free: the queued run runs and succeeds, the list follows
  await scene.rowShows('queued-run', 'succeeded')
  t.equal(await page.evaluate('window.sameDocument'), true, 'all of it without a reload')

  await page.press('Escape')
  await page.waitFor("document.getElementById('run').hidden", 'Escape closes the run view')
  t.same(await page.cspViolations(), [], 'no CSP violation')
  t.same(page.problems, [], 'no exception, no console error')
})

t.test('Purge asks first: Escape keeps the queue, the confirmation cancels it', async t => {
  const scene = await consoleScene(t)
  if (scene === undefined) return
  const { app, client, page } = scene
  t.equal((await client.submit('/hold/busy', 'busy')).status, 202)
  await app.waitForHeld(1)
  for (const id of ['waiting-1', 'waiting-2']) t.equal((await client.submit('/json/x', id)).status, 202)
  await scene.rowShows('waiting-2', 'queued')
  await page.waitFor("document.getElementById('t-backlog').textContent === '2'", 'the backlog tile: 2')

  await activate(page, '#purge')
  await page.waitFor("document.getElementById('purge-dialog').open && document.activeElement.value === 'keep'", 'the confirmation, Keep focused')
  await page.press('Escape')
  await page.waitFor("!document.getElementById('purge-dialog').open", 'the confirmation closed')
  t.equal((await client.read('waiting-1')).record.status, 'queued', 'Escape purged nothing')

  await activate(page, '#purge')
  await page.waitFor("document.getElementById('purge-dialog').open", 'the confirmation again')
  await activate(page, '#purge-confirm')
  await scene.rowShows('waiting-1', 'canceled')
  await scene.rowShows('waiting-2', 'canceled')
  t.equal((await client.read('waiting-2')).record.status, 'canceled')
  t.equal((await client.read('busy')).record.status, 'running', 'the running run is not purged')
  await page.waitFor("document.getElementById('t-backlog').textContent === '0'", 'the backlog tile: 0')
  app.held[0]?.res.end('{}')
  t.same(page.problems, [])
})

t.test('Caller and Urgency: the token\'s sub and the Priority of each run; a keyed sync run\'s dash and 3; labelled on a card', async t => {
  const scene = await consoleScene(t, 1280, 800, { DISABLE_AUTH: 'false' })
  if (scene === undefined) return
  const { app, h, page } = scene
  const as = async (sub: string): Promise<ReturnType<typeof runsClient>> => runsClient({ base: h.base, project: 'proj', app: 'app', token: await h.issuer.sign('proj', { claims: { sub } }) })
  const [x, bob] = [await as('operator-x'), await as('bob')]
  t.equal((await x.submit('/hold/urgent', 'urgent-run', { headers: { priority: 'u=1' } })).status, 202)
  const held = await app.waitForHeld(1)
  t.equal((await bob.submit('/json/plain', 'plain-run')).status, 202)
  const keyed = x.call('/json/keyed', { headers: { 'idempotency-key': 'k-1', 'x-request-id': 'keyed-run', priority: 'u=0' }, body: '{}' })
  await scene.rowShows('keyed-run', 'running')
  await scene.rowShows('plain-run', 'queued')
  const shown = async (): Promise<string[][]> => await page.evaluate(`[...document.querySelectorAll('#runs tbody tr')].map(row =>
    [row.dataset.runId, ...['Caller', 'Urgency'].map(label => row.querySelector('td[data-label="' + label + '"]').textContent)])`)
  t.same(await shown(), [['keyed-run', '—', '3'], ['plain-run', 'bob', '3'], ['urgent-run', 'operator-x', '1']], 'each run\'s caller and urgency')
  t.same(await page.evaluate("[...document.querySelectorAll('#runs thead th')].map(th => th.textContent)"),
    ['Run', 'Status', 'Caller', 'Urgency', 'Attempt', 'Created', 'Started', 'Duration'], 'the columns, in order')
  // the run's button stays the row's control: Tab reaches it, Enter opens the run
  await page.evaluate("document.getElementById('purge').focus()")
  await page.press('Tab')
  t.equal(await page.evaluate('document.activeElement.textContent'), 'keyed-run', 'Tab goes from Purge to the first run')
  await page.press('Enter')
  await page.waitFor("!document.getElementById('run').hidden && document.getElementById('run-id').textContent === 'keyed-run'", 'the run view')
  await page.press('Escape')

  await page.resize(390, 844)
  await page.waitFor("getComputedStyle(document.querySelector('#runs thead')).display === 'none'", 'the runs as cards')
  t.same(await page.evaluate(`['Caller', 'Urgency'].map(label => getComputedStyle(document.querySelector('#runs tr[data-run-id="urgent-run"] td[data-label="' + label + '"]'), '::before').content)`),
    ['"Caller"', '"Urgency"'], 'a card labels them')
  held.res.end('{}')
  t.equal((await keyed).status, 200)
  await page.waitFor(`${rowCell('keyed-run', 'Status')} === 'succeeded' && ${rowCell('plain-run', 'Status')} === 'succeeded'`, 'the runs ended')
  t.same(await shown(), [['keyed-run', '—', '3'], ['plain-run', 'bob', '3'], ['urgent-run', 'operator-x', '1']], 'the same once they ended')
  t.same(await page.cspViolations(), [])
  t.same(page.problems, [])
})

t.test('at 390 and 1280 pixels wide nothing overflows: tiles, charts, runs list (a long caller too), run view', async t => {
  const scene = await consoleScene(t, 390, 844, { DISABLE_AUTH: 'false' })
  if (scene === undefined) return
  const { app, h, page } = scene
  const sub = 'a-service-account-with-a-long-subject-0123456789@example-project.iam.example.com'
  const client = runsClient({ base: h.base, project: 'proj', app: 'app', token: await h.issuer.sign('proj', { claims: { sub } }) })
  t.equal((await client.submit('/ndjson/wide', 'a-long-run-id-of-sixty-four-characters-0123456789-abcdefghijklmn')).status, 202)
  const stream = await app.waitForHeld(1)
  stream.res.write(`${JSON.stringify({ text: 'a long event without spaces '.repeat(3) + 'x'.repeat(300) })}\n`)
  for (let i = 0; i < 15; i++) t.equal((await client.submit('/json/x', `queued-${i}`)).status, 202)
  await scene.rowShows('queued-14', 'queued')
  t.equal(await page.evaluate(rowCell('queued-14', 'Caller')), sub, 'the long caller, whole')
  await activate(page, '#runs tr[data-run-id^="a-long-run-id"] button')
  await page.waitFor("document.querySelectorAll('#run-events li').length === 1", 'the run view with its event')
  for (const [width, height] of [[390, 844], [1280, 800]] as const) {
    await page.resize(width, height)
    // the charts follow the window's resize event: wait until each has its container's width
    await page.waitFor(`innerWidth === ${width} && [...document.querySelectorAll('.chart')].every(chart =>
      Math.abs(chart.querySelector('.uplot').getBoundingClientRect().width - chart.clientWidth) <= 1)`, `charts resized to ${width}`)
    const seen = await page.evaluate<{ scrollWidth: number, innerWidth: number, out: string[] }>(OVERFLOW)
    t.equal(seen.innerWidth, width)
    t.ok(seen.scrollWidth <= width, `${width}: the page is ${seen.scrollWidth} px wide`)
    t.same(seen.out, [], `${width}: no element reaches past the window's right edge`)
  }
  t.equal(await page.evaluate("getComputedStyle(document.querySelector('#runs thead')).display"), 'table-header-group', '1280: the runs as a table')
  await page.resize(390, 844)
  t.equal(await page.evaluate("getComputedStyle(document.querySelector('#runs thead')).display"), 'none', '390: the runs as cards')
  stream.res.end()
  t.same(page.problems, [])
})
