import type * as PromClient from 'prom-client'
import { requireCjs } from '../shared/require-cjs.ts'

// prom-client's core, without its index: the index loads every default metric, and the CPU one
// requires @opentelemetry/api (for exemplars, which the sidecar does not use) whether tracing is
// on or not. Measured on Node 20: the index with its default metrics costs a process 11.7 MB of
// resident memory and 40 ms of its start; these modules with the same metrics 7.6 MB and 14 ms.
// prom-client has no `exports` map, so these paths are public; the types are the index's own.
// test/metrics/prom-core.test.ts checks they are the index's classes, and that the default
// metrics here are the index's, by name.

export const Registry: typeof PromClient.Registry = requireCjs('prom-client/lib/registry.js')
export const Counter: typeof PromClient.Counter = requireCjs('prom-client/lib/counter.js')
export const Gauge: typeof PromClient.Gauge = requireCjs('prom-client/lib/gauge.js')

type Collector = (registry: PromClient.Registry, config: { eventLoopMonitoringPrecision: number }) => void

/** prom-client's default metrics other than the CPU counters, as `collectDefaultMetrics` registers them. */
const COLLECTORS = [
  'processStartTime', 'osMemoryHeap', 'processOpenFileDescriptors', 'processMaxFileDescriptors', 'eventLoopLag',
  ...(typeof process.getActiveResourcesInfo === 'function' ? ['processResources'] : []),
  'processHandles', 'processRequests', 'heapSizeAndUsed', 'heapSpacesSizeAndUsed', 'version', 'gc'
]

/**
 * prom-client's default process metrics in `registry`, as `collectDefaultMetrics` makes them (same
 * names, help and values): each collector of its own, and the three CPU counters kept here.
 */
export function collectProcessMetrics (registry: PromClient.Registry): void {
  const registers = [registry]
  let last = process.cpuUsage()
  // in prom-client's order: the user counter's collect (at scrape time) sets all three
  new Counter({
    name: 'process_cpu_user_seconds_total',
    help: 'Total user CPU time spent in seconds.',
    registers,
    collect () {
      const now = process.cpuUsage()
      const user = now.user - last.user
      const system = now.system - last.system
      last = now
      this.inc(user / 1e6)
      systemSeconds.inc(system / 1e6)
      totalSeconds.inc((user + system) / 1e6)
    }
  })
  const systemSeconds = new Counter({ name: 'process_cpu_system_seconds_total', help: 'Total system CPU time spent in seconds.', registers })
  const totalSeconds = new Counter({ name: 'process_cpu_seconds_total', help: 'Total user and system CPU time spent in seconds.', registers })
  const config = { eventLoopMonitoringPrecision: 10 }
  for (const name of COLLECTORS) (requireCjs(`prom-client/lib/metrics/${name}.js`) as Collector)(registry, config)
}
