// The run-store gauges never hold a scrape: a count the store does not give within a moment keeps its last value.
import t from 'tap'
import { SidecarMetrics } from '../../src/metrics/metrics.ts'
import { sampleValue } from '../helpers/admin-metrics.ts'
import { patient } from '../helpers/timing.ts'

t.test('a store that stops answering: /metrics answers within 250 ms, with the last counts', async t => {
  const metrics = new SidecarMetrics()
  let answering = true
  let reads = 0
  const count = (value: number) => async (): Promise<number> => {
    reads++
    return answering ? value : await new Promise<number>(() => {}) // never settles, as a stopped Redis
  }
  metrics.watchAsyncQueue(count(3), count(2))
  const first = await metrics.registry.metrics()
  t.equal(sampleValue(first, 'sidecar_async_queued_runs'), 3)
  t.equal(sampleValue(first, 'sidecar_async_running_runs'), 2)
  answering = false
  for (let i = 0; i < 3; i++) {
    const started = performance.now()
    const text = await metrics.registry.metrics()
    const took = performance.now() - started
    // the hung count never settles: a scrape that waited on it would never end; a scaled bound excludes that, not the 250 ms wait
    t.ok(took < patient(1000), `scrape ${i + 1} took ${Math.round(took)} ms, not held by the hung count`)
    t.equal(sampleValue(text, 'sidecar_async_queued_runs'), 3, 'the last backlog kept')
    t.equal(sampleValue(text, 'sidecar_async_running_runs'), 2, 'the last running count kept')
  }
  t.equal(reads, 4, 'one read per gauge in flight at a time: the hung one is not read again')
})

t.test('a count that fails keeps the last value too', async t => {
  const metrics = new SidecarMetrics()
  let fail = false
  metrics.watchAsyncQueue(async () => { if (fail) throw new Error('down'); return 5 }, async () => 1)
  t.equal(sampleValue(await metrics.registry.metrics(), 'sidecar_async_queued_runs'), 5)
  fail = true
  t.equal(sampleValue(await metrics.registry.metrics(), 'sidecar_async_queued_runs'), 5)
})
