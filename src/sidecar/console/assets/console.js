// The operator console's page (docs/console.md): it reads /console/api every second, charts the
// last 15 minutes with uPlot, lists the app's runs, and follows one run's events. Everything shown
// that came from a caller (run ids, callers, results, events) is set as text, never as markup.
'use strict'

const API = '/console/api'
const REFRESH_MS = 1000
const HISTORY_MS = 5000
const PAGE_SIZE = 20
const EVENTS_SHOWN = 500

const $ = id => document.getElementById(id)
const state = { signedIn: false, cursors: [''], page: 0, next: null, run: null, events: null, charts: [] }

/** A GET or POST of the console's API; a 401 shows the sign-in form. */
async function api (path, method = 'GET') {
  const res = await fetch(API + path, { method, credentials: 'same-origin', headers: { accept: 'application/json' } })
  if (res.status === 401) { signedOut(); throw new Error('signed out') }
  const body = res.headers.get('content-type')?.startsWith('application/json') ? await res.json() : null
  if (!res.ok) throw new Error(body?.message ?? `HTTP ${res.status}`)
  return body
}

function text (id, value) { $(id).textContent = value }
function el (tag, content, className) {
  const node = document.createElement(tag)
  if (content !== undefined) node.textContent = content
  if (className) node.className = className
  return node
}

// ---- sign-in

function signedOut () {
  state.signedIn = false
  $('console').hidden = true
  $('logout').hidden = true
  $('login').hidden = false
  $('token').focus()
}

function signedIn () {
  if (state.signedIn) return
  state.signedIn = true
  $('login').hidden = true
  $('console').hidden = false
  $('logout').hidden = false
  drawCharts()
  void refreshHistory()
}

$('login-form').addEventListener('submit', async event => {
  event.preventDefault()
  text('login-error', '')
  const res = await fetch('/console/login', {
    method: 'POST', credentials: 'same-origin', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: $('token').value })
  })
  $('token').value = ''
  if (res.status !== 204) { text('login-error', res.status === 401 ? 'That is not the console token.' : `Sign-in failed (HTTP ${res.status}).`); return }
  await refresh()
})

$('logout').addEventListener('click', async () => {
  await fetch('/console/logout', { method: 'POST', credentials: 'same-origin' })
  closeRun()
  signedOut()
})

// ---- tiles

function showOverview (o) {
  text('app-name', `${o.app.project_id}/${o.app.app_name}`)
  const ready = $('ready')
  ready.textContent = o.ready ? 'ready' : `not ready: ${o.not_ready}`
  ready.className = `pill ${o.ready ? 'ok' : 'bad'}`
  text('t-slots', `${o.slots.in_use} / ${o.slots.limit === 0 ? '∞' : o.slots.limit}`)
  text('t-waiting', String(o.waiting))
  text('t-backlog', String(o.backlog.total))
  text('t-urgency', o.backlog.by_urgency.map((n, u) => n > 0 ? `u${u}: ${n}` : '').filter(Boolean).join('  ') || 'by urgency: none waiting')
  text('t-running', String(o.running))
  const store = $('t-store')
  store.textContent = `${o.run_store.backend} ${o.run_store.up ? 'up' : 'down'}`
  store.className = `figure ${o.run_store.up ? 'ok' : 'bad'}`
  text('t-webhooks', `${o.webhooks.pending} / ${o.webhooks.failed}`)
  const callers = $('t-callers')
  callers.replaceChildren(...o.busiest_callers.map(c => el('li', `${c.caller || '(no caller)'}: ${c.inflight} in flight`)))
  if (o.busiest_callers.length === 0) callers.replaceChildren(el('li', 'no call at the app'))
}

// ---- charts (uPlot)

const CHARTS = [
  { id: 'c-requests', series: [['2xx', '#17773a'], ['3xx', '#5b6576'], ['4xx', '#8a5a00'], ['5xx', '#b3261e']] },
  { id: 'c-latency', series: [['p50', '#1f5fbf'], ['p99', '#b3261e']], scale: 1000 },
  { id: 'c-slots', series: [['slots', '#1f5fbf'], ['waiting', '#8a5a00']] },
  { id: 'c-backlog', series: [['backlog', '#6a3fb5']] }
]

function chartWidth (id) { return Math.max(200, $(id).clientWidth) }

function drawCharts () {
  if (state.charts.length > 0 || typeof uPlot !== 'function') return
  state.charts = CHARTS.map(chart => {
    const opts = {
      width: chartWidth(chart.id),
      height: 150,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [{ size: 30 }, { size: 44 }],
      series: [{}, ...chart.series.map(([label, stroke]) => ({ label, stroke, width: 1.5, spanGaps: false }))]
    }
    return { chart, plot: new uPlot(opts, [[], ...chart.series.map(() => [])], $(chart.id)) }
  })
}

addEventListener('resize', () => { for (const { chart, plot } of state.charts) plot.setSize({ width: chartWidth(chart.id), height: 150 }) })

async function refreshHistory () {
  if (!state.signedIn) return
  try {
    const columns = await api('/history')
    drawCharts()
    for (const { chart, plot } of state.charts) {
      const scale = chart.scale ?? 1
      plot.setData([columns.time, ...chart.series.map(([name]) => columns[name].map(v => v === null ? null : v * scale))])
    }
  } catch {}
}

// ---- runs

function duration (r) {
  if (r.run_time_ms !== undefined) return r.run_time_ms < 1000 ? `${r.run_time_ms.toFixed(0)} ms` : `${(r.run_time_ms / 1000).toFixed(2)} s`
  if (r.started_at) return `${((Date.now() - Date.parse(r.started_at)) / 1000).toFixed(0)} s so far`
  return ''
}
const time = iso => iso ? new Date(iso).toLocaleTimeString() : ''

function runRow (r) {
  const row = document.createElement('tr')
  row.dataset.runId = r.run_id
  const open = el('button', r.run_id, 'link')
  open.type = 'button'
  open.addEventListener('click', () => openRun(r.run_id))
  const cells = [
    ['Run', open], ['Status', el('span', r.status, `status-${r.status}`)],
    // a recorded sync call keeps no caller (null); its urgency is the default, 3
    ['Caller', el('span', r.caller ?? '—', 'caller')], ['Urgency', el('span', String(r.urgency ?? 3))], ['Attempt', el('span', String(r.attempt ?? 1))],
    ['Created', el('span', time(r.created_at))], ['Started', el('span', time(r.started_at))], ['Duration', el('span', duration(r))]
  ]
  for (const [label, content] of cells) {
    const td = document.createElement('td')
    td.dataset.label = label
    td.append(content)
    row.append(td)
  }
  return row
}

async function refreshRuns () {
  const params = new URLSearchParams({ limit: String(PAGE_SIZE) })
  const status = $('status').value
  const cursor = state.cursors[state.page]
  if (cursor) params.set('cursor', cursor)
  else if (status) params.set('status', status)
  const page = await api(`/runs?${params}`)
  state.next = page.next_cursor
  $('runs').tBodies[0].replaceChildren(...page.runs.map(runRow))
  $('runs-empty').hidden = page.runs.length > 0
  $('older').disabled = page.next_cursor === null
  $('newer').disabled = state.page === 0
}

$('status').addEventListener('change', () => { state.cursors = ['']; state.page = 0; void refreshRuns() })
$('older').addEventListener('click', () => {
  if (state.next === null) return
  state.cursors[++state.page] = state.next
  void refreshRuns()
})
$('newer').addEventListener('click', () => { if (state.page > 0) { state.page--; void refreshRuns() } })

$('purge').addEventListener('click', () => $('purge-dialog').showModal())
$('purge-dialog').addEventListener('close', async () => {
  if ($('purge-dialog').returnValue !== 'purge') return
  try {
    const { canceled } = await api('/purge', 'POST')
    text('run-message', '')
    $('purge').textContent = `Purge queued… (${canceled} canceled)`
  } catch (error) { $('purge').textContent = `Purge queued… (${error.message})` }
  await refreshRuns()
})

// ---- one run

function showRecord (record) {
  const { result, ...rest } = record
  text('run-record', JSON.stringify(rest, null, 2))
  $('run-result').hidden = !('result' in record)
  text('run-result-text', 'result' in record ? JSON.stringify(result, null, 2) : '')
  $('cancel').hidden = !(record.status === 'queued' || record.status === 'running')
}

function addEvent (label, data, className) {
  const list = $('run-events')
  list.append(el('li', label === '' ? data : `${label} ${data}`, className))
  while (list.children.length > EVENTS_SHOWN) list.firstElementChild.remove()
  list.scrollTop = list.scrollHeight
}

async function openRun (runId) {
  closeRun()
  state.run = runId
  text('run-id', runId)
  text('run-message', '')
  $('run-events').replaceChildren()
  $('run').hidden = false
  $('run').focus()
  try { showRecord(await api(`/runs/${runId}`)) } catch (error) { text('run-message', error.message) }
  const events = new EventSource(`${API}/runs/${runId}/events`)
  state.events = events
  events.onmessage = e => { addEvent('', e.data) }
  events.addEventListener('retry', e => { addEvent('retry', e.data, 'kind') })
  events.addEventListener('error', e => { if (e.data !== undefined) addEvent('error', e.data, 'kind') })
  events.addEventListener('done', e => {
    addEvent('done', '', 'kind')
    events.close()
    showRecord(JSON.parse(e.data))
  })
}

function closeRun () {
  state.events?.close()
  state.events = null
  state.run = null
  $('run').hidden = true
}

$('run-close').addEventListener('click', closeRun)
addEventListener('keydown', e => { if (e.key === 'Escape' && state.run !== null && !$('purge-dialog').open) closeRun() })

$('cancel').addEventListener('click', async () => {
  const runId = state.run
  try {
    const record = await api(`/runs/${runId}/cancel`, 'POST')
    if (state.run === runId && record.created_at !== undefined) showRecord(record)
    text('run-message', `Canceled: ${record.status}`)
  } catch (error) { text('run-message', `Not canceled: ${error.message}`) }
  await refreshRuns()
})

// ---- refresh loop

async function refresh () {
  try {
    showOverview(await api('/overview'))
    signedIn()
    await refreshRuns()
    if (state.run !== null && state.events?.readyState !== EventSource.CLOSED) showRecord(await api(`/runs/${state.run}`))
  } catch {}
}

void refresh()
setInterval(() => { if (state.signedIn) void refresh() }, REFRESH_MS)
setInterval(() => { void refreshHistory() }, HISTORY_MS)
