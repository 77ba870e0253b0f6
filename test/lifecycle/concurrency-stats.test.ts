import { performance } from 'node:perf_hooks'
import t from 'tap'
import { ConcurrencyStats } from '../../src/lifecycle/concurrency-stats.ts'
import { scrape } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { eventually } from '../helpers/sidecar-harness.ts'
import { sleep } from '../helpers/timing.ts'
import { invoke, json, type SeenRequest, sidecarFor, startMixedApp } from '../sidecar/concurrency-kit.ts'

// ConcurrencyStats (issue 6): time-weighted average concurrency and admissions per second over a
// sliding window, as an autoscaler reads them from /metrics.

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

/** Replaces performance.now() (which ConcurrencyStats reads) with a clock the test moves; restored at teardown. */
function fakeClock (t: Tap, start = 10_000): { set: (ms: number) => void } {
  let now = start
  const real = Object.getOwnPropertyDescriptor(performance, 'now')
  performance.now = () => now
  t.teardown(() => {
    if (real === undefined) delete (performance as { now?: unknown }).now
    else Object.defineProperty(performance, 'now', real)
  })
  return { set: ms => { now = start + ms } }
}

const close = (t: Tap, actual: number, expected: number, message: string): void => {
  t.ok(Math.abs(actual - expected) < 1e-9, `${message} (${actual} ≈ ${expected})`)
}

t.test('time-weighted average: 2 in flight for the whole time is 2; half the time is 1', async t => {
  const clock = fakeClock(t)
  const stats = new ConcurrencyStats()
  t.teardown(() => { stats.stop() })
  t.equal(stats.averageConcurrency(), 0, 'nothing yet, no time yet')
  t.equal(stats.requestsPerSecond(), 0)
  stats.change(1)
  stats.change(1)
  t.equal(stats.averageConcurrency(), 2, 'no time has passed: the current value')
  clock.set(500)
  close(t, stats.averageConcurrency(), 2, '2 held for 500 ms')
  close(t, stats.requestsPerSecond(), 4, '2 admissions in 0.5 s')
  stats.change(-1)
  stats.change(-1)
  clock.set(1000)
  close(t, stats.averageConcurrency(), 1, '2 for half the time, 0 for the other half')
  close(t, stats.requestsPerSecond(), 2, 'releases are not admissions')
})

t.test('the average weighs each level by how long it lasted', async t => {
  const clock = fakeClock(t)
  const stats = new ConcurrencyStats()
  t.teardown(() => { stats.stop() })
  stats.change(3) // 3 for 100 ms
  clock.set(100)
  stats.change(-2) // 1 for 300 ms
  clock.set(400)
  stats.change(4) // 5 for 600 ms
  clock.set(1000)
  close(t, stats.averageConcurrency(), (3 * 100 + 1 * 300 + 5 * 600) / 1000, 'area under the curve over elapsed time')
  close(t, stats.requestsPerSecond(), 7, '3 + 4 admissions in 1 s')
})

t.test('the window slides: old concurrency and old admissions drop out', async t => {
  const clock = fakeClock(t)
  // a 1 s window, with the once-a-second snapshot running for real
  const stats = new ConcurrencyStats(1)
  // snapshots at about 1 s and 2 s (real time) read the clock as set just before; the reads below
  // come at about 1.3 s and 2.5 s, well clear of them
  t.teardown(() => { stats.stop() })
  stats.change(1)
  clock.set(1000) // the first snapshot will read this time
  await sleep(1300) // the snapshot timer runs in real time and leaves no trace to wait for
  clock.set(1500)
  close(t, stats.averageConcurrency(), 1, 'inside the first window')
  close(t, stats.requestsPerSecond(), 1 / 1.5, 'one admission in 1.5 s')
  stats.change(-1)
  clock.set(2000) // the second snapshot: the window now starts at 1000
  await sleep(1200) // again the real snapshot timer
  clock.set(2500)
  // 1 from 1000 to 1500, 0 from 1500 to 2500, over the 1500 ms since the window start
  close(t, stats.averageConcurrency(), 500 / 1500, 'only what happened since the window start')
  close(t, stats.requestsPerSecond(), 0, 'the admission before the window is forgotten')
})

t.test('through the sidecar: 8 held calls with concurrency 8 show on the autoscaling gauges', async t => {
  const held: SeenRequest[] = []
  const app = await startMixedApp(seen => { held.push(seen) })
  t.teardown(() => app.close())
  const beforeStart = performance.now()
  const h = await sidecarFor(t, app.url, { REPLICA_CONCURRENCY: '8' })
  const afterStart = performance.now()
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const idle = await scrape(h)
  t.equal(idle.sidecar_average_concurrency, 0, 'no calls yet')
  t.equal(idle.sidecar_requests_per_second, 0)
  t.equal(idle.sidecar_concurrency_utilization, 0)

  const firstSent = performance.now()
  const calls = Array.from({ length: 8 }, (_, n) => invoke(h, '/hold', `s-${n}`))
  await eventually(() => held.length === 8)
  const allHeld = performance.now()
  await sleep(1000) // the average is over time: only time builds it up
  const before = performance.now()
  const m = await scrape(h)
  const after = performance.now()
  for (const seen of held) json(seen.res, { id: seen.id })
  t.same((await Promise.all(calls)).map(r => r.status), Array(8).fill(200))

  const average = m.sidecar_average_concurrency as number
  const utilization = m.sidecar_concurrency_utilization as number
  const rate = m.sidecar_requests_per_second as number
  t.equal(m.sidecar_inflight_requests, 8)
  // the window is younger than 10 s: it starts when the sidecar started (between beforeStart and afterStart)
  const low = 8 * (before - allHeld) / (after - beforeStart)
  const high = 8 * (after - firstSent) / (before - afterStart)
  t.ok(average > 0 && average >= low && average <= high, `average concurrency ${average} within [${low.toFixed(3)}, ${high.toFixed(3)}]`)
  t.ok(Math.abs(utilization - average / 8) <= 1e-3 * average, `utilization ${utilization} = average / 8 (${average / 8})`)
  t.ok(rate > 0 && rate >= 8000 / (after - beforeStart) && rate <= 8000 / (before - afterStart), `requests per second ${rate}`)
})

t.test('without a limit, utilization is 0 while the average still counts', async t => {
  const app = await startMixedApp(seen => { setTimeout(() => { json(seen.res, { id: seen.id }) }, 200) })
  t.teardown(() => app.close())
  const h = await sidecarFor(t, app.url)
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  const call = invoke(h, '/x', 'u-1')
  await eventually(() => app.seen.length === 1)
  await sleep(100) // the average is over time: only time builds it up
  const m = await scrape(h)
  t.ok((m.sidecar_average_concurrency as number) > 0)
  t.equal(m.sidecar_concurrency_utilization, 0)
  t.ok((m.sidecar_requests_per_second as number) > 0)
  t.equal((await call).status, 200)
})
