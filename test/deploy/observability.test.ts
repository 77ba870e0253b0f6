import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { fetchMetrics } from '../helpers/admin-metrics.ts'
import { findProgram } from '../helpers/chromium.ts'
import { runIn } from '../helpers/npm-project.ts'
import { sidecarFor, startTestServer } from '../helpers/sidecar-harness.ts'

// docs/metrics.md, "Dashboards and alerts": the alert rules load in Prometheus's own checker and
// their unit tests pass (each alert fires on its series after its `for:`, not before); every
// dashboard query is valid PromQL to the same checker; and every metric the rules and the
// dashboard name is one a running sidecar serves.

const DIR = fileURLToPath(new URL('../../deploy/observability/', import.meta.url))
const PROMTOOL = 'apt-get install prometheus (its promtool)'

/**
 * Metrics the dashboard names before the sidecar serves them, with the work that adds them: once
 * served, the test says to take them off this list.
 */
const COMING: Readonly<Record<string, string>> = {}

interface Panel { id: number, type: string, title: string, gridPos: { h: number, w: number, x: number, y: number }, datasource?: { uid: string }, targets?: Array<{ refId: string, expr: string }> }
interface Dashboard { uid: string, title: string, schemaVersion: number, panels: Panel[], templating: { list: Array<{ name: string, type: string, query: unknown }> } }

const dashboard = JSON.parse(await readFile(join(DIR, 'grafana-dashboard.json'), 'utf8')) as Dashboard
const rules = await readFile(join(DIR, 'prometheus-rules.yaml'), 'utf8')
const queries = dashboard.panels.flatMap(panel => (panel.targets ?? []).map(target => ({ panel, ...target })))
const metricNames = (text: string): string[] => [...new Set(text.match(/\bsidecar_[a-z0-9_]+/g) ?? [])]

/** As Grafana fills them in: a 5-minute rate window, every job. */
const asPrometheusSees = (expr: string): string => expr.replaceAll('$__rate_interval', '5m').replaceAll('$job', '.*')

t.test('promtool: the rules load, and their unit tests pass', async t => {
  const promtool = findProgram(t, 'promtool', PROMTOOL)
  if (promtool === undefined) return
  const checked = await runIn(DIR, promtool, ['check', 'rules', 'prometheus-rules.yaml'])
  t.equal(checked.code, 0, checked.stdout + checked.stderr)
  t.match(checked.stdout, 'SUCCESS: 4 rules found')
  const tested = await runIn(DIR, promtool, ['test', 'rules', 'prometheus-rules.test.yaml'])
  t.equal(tested.code, 0, tested.stdout + tested.stderr)
  t.match(tested.stdout, 'SUCCESS')
  const alerts = [...rules.matchAll(/- alert: (\w+)/g)].map(m => m[1])
  t.same(alerts, ['SidecarRunStoreDown', 'SidecarAsyncBacklogGrowing', 'SidecarWebhooksFailing', 'SidecarAppNotReady'])
  const testFile = await readFile(join(DIR, 'prometheus-rules.test.yaml'), 'utf8')
  for (const alert of alerts) t.match(testFile, new RegExp(`alertname: ${alert as string}\\n\\s+exp_alerts:\\n\\s+- exp_labels`), `${alert as string} has a test where it fires`)
})

t.test('the dashboard: its panels, and every query valid PromQL to promtool', async t => {
  t.equal(dashboard.uid, 'app-sidecar')
  t.same(dashboard.templating.list.map(v => [v.name, v.type]), [['datasource', 'datasource'], ['job', 'query']])
  t.equal(new Set(dashboard.panels.map(p => p.id)).size, dashboard.panels.length, 'panel ids are unique')
  for (const panel of dashboard.panels) {
    const { x, w, h } = panel.gridPos
    t.ok(x >= 0 && w > 0 && x + w <= 24 && h > 0, `${panel.title}: fits the 24-column grid`)
    if (panel.type === 'row') continue
    t.equal(panel.datasource?.uid, '${datasource}', `${panel.title}: the chosen Prometheus`)
    t.ok((panel.targets ?? []).length > 0, `${panel.title}: has a query`)
    for (const target of panel.targets ?? []) t.match(target.expr, /job=~"\$job"/, `${panel.title} ${target.refId}: of the chosen job`)
  }
  const titles = dashboard.panels.map(p => p.title).join(' | ')
  for (const topic of ['Requests/s by status', 'Latency', 'Slots', 'waiting', 'backlog by urgency', 'retries', 'Webhook', 'Run store']) t.match(titles, topic, `a panel for ${topic}`)

  const promtool = findProgram(t, 'promtool', PROMTOOL)
  if (promtool === undefined) return
  // each query as a recording rule: promtool parses it as Prometheus would
  const work = await mkdtemp(join(tmpdir(), 'dashboard-promql-'))
  t.teardown(() => rm(work, { recursive: true, force: true }))
  const recorded = { groups: [{ name: 'dashboard', rules: queries.map(q => ({ record: `dashboard:panel_${q.panel.id}_${q.refId}`, expr: asPrometheusSees(q.expr) })) }] }
  await writeFile(join(work, 'queries.yaml'), JSON.stringify(recorded))
  const checked = await runIn(work, promtool, ['check', 'rules', 'queries.yaml'])
  t.equal(checked.code, 0, checked.stdout + checked.stderr)
  t.match(checked.stdout, `SUCCESS: ${queries.length} rules found`)
})

t.test('every metric the dashboard and the rules name is one a running sidecar serves', async t => {
  const app = await startTestServer((req, res) => { res.end('{}') })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const text = await fetchMetrics(h.admin)
  const served = new Set([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].flatMap(([, name, type]) =>
    type === 'histogram' ? [`${name as string}_bucket`, `${name as string}_sum`, `${name as string}_count`, name as string] : [name as string]))
  t.ok(served.has('sidecar_app_ready') && served.has('sidecar_async_queued_runs_by_urgency'), 'the scan reads the sidecar\'s metrics')

  const named = new Set([...metricNames(rules), ...queries.flatMap(q => metricNames(q.expr)), ...metricNames(JSON.stringify(dashboard.templating))])
  t.ok(named.size >= 20, `${named.size} metrics named`)
  t.same([...named].filter(name => !served.has(name) && COMING[name] === undefined), [], 'every metric named is served')
  t.same(Object.keys(COMING).filter(name => served.has(name)), [], 'a metric still listed as coming is served now: take it off COMING')
  t.ok(named.has('sidecar_run_retries_total'), 'the retries have a panel')
})
