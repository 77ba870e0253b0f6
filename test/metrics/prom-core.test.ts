import t from 'tap'
import * as promClient from 'prom-client'
import { collectProcessMetrics, Counter, Gauge, Registry } from '../../src/metrics/prom-core.ts'

// The sidecar loads prom-client's core modules without its index (see prom-core.ts): they must be
// the index's own classes, and its default metrics the index's, so that a prom-client release that
// moves or adds one fails here, not on an operator's dashboard.

t.test('the core modules are the index\'s own', async t => {
  t.equal(Registry, promClient.Registry)
  t.equal(Counter, promClient.Counter)
  t.equal(Gauge, promClient.Gauge)
})

t.test('the process metrics are collectDefaultMetrics\' own: names, help, types, in its order', async t => {
  const ours = new Registry()
  collectProcessMetrics(ours)
  const theirs = new promClient.Registry()
  promClient.collectDefaultMetrics({ register: theirs })
  const shape = async (registry: promClient.Registry): Promise<Array<{ name: string, help: string, type: string }>> =>
    (await registry.getMetricsAsJSON()).map(({ name, help, type }) => ({ name, help, type: String(type) }))
  const expected = await shape(theirs)
  t.ok(expected.length >= 10, `prom-client has ${expected.length} default metrics`)
  t.same(await shape(ours), expected)
})

t.test('the CPU counters count this process\'s CPU time, the total their sum', async t => {
  const registry = new Registry()
  collectProcessMetrics(registry)
  const value = async (name: string): Promise<number> => (await registry.getSingleMetric(name)?.get())?.values[0]?.value ?? Number.NaN
  await registry.metrics()
  const before = await value('process_cpu_seconds_total')
  // 50 ms of this process's own CPU time, however long a busy machine takes to give it (not 50 ms of wall time)
  const start = process.cpuUsage()
  const spent = (): number => { const { user, system } = process.cpuUsage(start); return (user + system) / 1000 }
  while (spent() < 50) Math.sqrt(Math.random())
  await registry.metrics()
  const [user, system, total] = [await value('process_cpu_user_seconds_total'), await value('process_cpu_system_seconds_total'), await value('process_cpu_seconds_total')]
  t.ok(total - before >= 0.03, `at least 30 ms counted (${((total - before) * 1000).toFixed(1)} ms)`)
  t.ok(Math.abs(user + system - total) < 1e-9, 'user + system = total')
})
