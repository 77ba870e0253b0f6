import t from 'tap'
import { SidecarMetrics } from '../../../src/metrics/metrics.ts'
import { ConsoleHistory, HISTORY_POINTS } from '../../../src/sidecar/console/console-history.ts'
import { histogramBuckets, quantileBetween } from '../../../src/sidecar/console/console-readings.ts'

// docs/console.md, "Charts": each 5 s reading of the sidecar's own metrics becomes one point:
// requests per second by status class over the interval, p50 and p99 of that interval's latency
// (as histogram_quantile estimates them), the gauges as read; 180 points kept, the oldest dropped.

t.test('one point per reading: rates by status class, the interval\'s quantiles, the gauges', async t => {
  const metrics = new SidecarMetrics()
  metrics.watchAsyncQueue(async () => 7, async () => 0)
  const history = new ConsoleHistory(metrics.registry)
  metrics.recordRequest('invoke', 200, 0.003) // before the first reading: in no interval
  await history.sample(1_000_000)

  for (let i = 0; i < 8; i++) metrics.recordRequest('invoke', 200, 0.003) // bucket (2.5 ms, 5 ms]
  metrics.recordRequest('management', 204, 0.003)
  metrics.recordRequest('invoke', 302, 0.003)
  for (let i = 0; i < 4; i++) metrics.recordRequest('invoke', 404, 0.03) // (25 ms, 50 ms]
  metrics.recordRequest('invoke', 499, 0.03)
  for (let i = 0; i < 5; i++) metrics.recordRequest('invoke', 503, 0.3) // (250 ms, 500 ms]
  metrics.changeInflight(3)
  metrics.changeQueued(2)
  await history.sample(1_005_000)

  const [first, second] = history.points
  t.same(first, {
    time: 1000, perSecond: { '2xx': null, '3xx': null, '4xx': null, '5xx': null }, p50: null, p99: null, slots: 0, waiting: 0, backlog: 7
  }, 'the first reading: no interval before it')
  t.same(second?.perSecond, { '2xx': 9 / 5, '3xx': 1 / 5, '4xx': 5 / 5, '5xx': 5 / 5 }, 'per second over the 5 s, every route, 499 a 4xx')
  // 20 requests: the 10th is in (2.5, 5] ms, the 9th of 10 there: 2.5 + 2.5 × 10/10; the 19.8th in (250, 500] ms: 250 + 250 × 4.8/5
  t.equal(second?.p50, 0.005)
  t.ok(Math.abs((second?.p99 as number) - (0.25 + 0.25 * 4.8 / 5)) < 1e-12, `p99 ${second?.p99}`)
  t.same([second?.slots, second?.waiting, second?.backlog], [3, 2, 7])

  await history.sample(1_010_000)
  t.same(history.points[2]?.perSecond, { '2xx': 0, '3xx': 0, '4xx': 0, '5xx': 0 }, 'a quiet interval: 0 per second')
  t.equal(history.points[2]?.p50, null, 'and no latency')
  const columns = history.columns()
  t.same(columns.time, [1000, 1005, 1010])
  t.same(columns['2xx'], [null, 9 / 5, 0])
  t.same(Object.keys(columns), ['time', '2xx', '3xx', '4xx', '5xx', 'p50', 'p99', 'slots', 'waiting', 'backlog'])
})

t.test('15 minutes kept: 180 points, the oldest dropped; start() reads at once, then every interval, until stop()', async t => {
  const metrics = new SidecarMetrics()
  const history = new ConsoleHistory(metrics.registry)
  for (let i = 0; i <= HISTORY_POINTS; i++) await history.sample(i * 5000)
  t.equal(history.points.length, 180)
  t.equal(history.points[0]?.time, 5, 'the first reading is gone')
  t.equal(history.points.at(-1)?.time, 900)

  const ticking = new ConsoleHistory(metrics.registry)
  ticking.start(20)
  const until = Date.now() + 5000
  while (ticking.points.length < 3 && Date.now() < until) await new Promise(resolve => setTimeout(resolve, 5))
  ticking.stop()
  const counted = ticking.points.length
  t.ok(counted >= 3, `${counted} readings`)
  await new Promise(resolve => setTimeout(resolve, 100))
  t.equal(ticking.points.length, counted, 'none after stop()')
})

t.test('quantiles as histogram_quantile: within a bucket, +Inf at the highest bound, none observed: null', async t => {
  const before = new Map([[0.1, 0], [1, 0], [Infinity, 0]])
  t.equal(quantileBetween(before, new Map([[0.1, 0], [1, 4], [Infinity, 4]]), 0.5), 0.1 + 0.9 * 2 / 4)
  t.equal(quantileBetween(before, new Map([[0.1, 1], [1, 1], [Infinity, 3]]), 0.9), 1, 'in +Inf: the highest finite bound')
  t.equal(quantileBetween(before, before, 0.5), null)
  const metrics = new SidecarMetrics()
  metrics.recordRequest('invoke', 200, 0.0004)
  metrics.recordRequest('websocket', 101, 3)
  const buckets = await histogramBuckets(metrics.registry, 'sidecar_request_duration_seconds')
  t.equal(buckets.get(0.0005), 1, 'summed over the routes')
  t.equal(buckets.get(Infinity), 2)
  t.same([...buckets.keys()].slice(-2), [60, Infinity], 'by bound, +Inf last')
})
