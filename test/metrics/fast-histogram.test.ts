import { Histogram, Registry } from 'prom-client'
import t from 'tap'
import { FastHistogram } from '../../src/metrics/fast-histogram.ts'

// The hot path's histogram must scrape exactly as prom-client's own would, for the same observations.

const BUCKETS = [0.001, 0.01, 0.1, 1]

function pair (labelName?: string): { fast: FastHistogram, fastRegistry: Registry, theirs: Histogram, theirRegistry: Registry } {
  const fastRegistry = new Registry()
  const theirRegistry = new Registry()
  const fast = new FastHistogram({ name: 'x_seconds', help: 'help "text"', buckets: BUCKETS, registry: fastRegistry, ...(labelName === undefined ? {} : { labelName }) })
  const theirs = new Histogram({ name: 'x_seconds', help: 'help "text"', buckets: BUCKETS, registers: [theirRegistry], labelNames: labelName === undefined ? [] : [labelName] })
  return { fast, fastRegistry, theirs, theirRegistry }
}

t.test('without a label: zeros from the start, then the same buckets, sum and count', async t => {
  const { fast, fastRegistry, theirs, theirRegistry } = pair()
  t.equal(await fastRegistry.metrics(), await theirRegistry.metrics(), 'before any observation')
  const cell = fast.cell()
  for (const value of [0, 0.001, 0.0011, 0.5, 1, 2, 1e9]) {
    cell.observe(value)
    theirs.observe(value)
  }
  const text = await fastRegistry.metrics()
  t.equal(text, await theirRegistry.metrics())
  t.match(text, /x_seconds_bucket\{le="0.001"\} 2\n/, 'a value on a bound counts in that bucket')
  t.match(text, /x_seconds_bucket\{le="\+Inf"\} 7\n/)
  t.match(text, /x_seconds_count 7\n/)
})

t.test('with a label: one series per value, in order of first use; reset clears the counts', async t => {
  const { fast, fastRegistry, theirs, theirRegistry } = pair('route')
  t.equal(await fastRegistry.metrics(), await theirRegistry.metrics(), 'no series before an observation')
  const observations: Array<[string, number]> = [['invoke', 0.02], ['websocket', 3], ['invoke', 0.0004], ['management', 0.1], ['invoke', 0.3]]
  for (const [route, value] of observations) {
    fast.cell(route).observe(value)
    theirs.labels(route).observe(value)
  }
  t.equal(await fastRegistry.metrics(), await theirRegistry.metrics())
  t.equal(fast.cell('invoke'), fast.cell('invoke'), 'a label value keeps its cell')
  fastRegistry.resetMetrics()
  t.match(await fastRegistry.metrics(), /x_seconds_count\{route="invoke"\} 0\n/)
  t.same((await fast.get()).values.filter(v => v.value !== 0), [], 'every count back to 0')
})
