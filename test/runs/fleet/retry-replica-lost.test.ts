import t from 'tap'
import { checkRetriedOnce, firstAttemptOnA, followToEnd, retriedEvents, retriesOn } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": a replica killed mid-run (SIGKILL: a spot VM
// reclaimed without a grace period) with the default heartbeat and RUN_LOST_AFTER_SECONDS: the
// other replica finds it lost, queues its run again instead of failing it, and runs attempt 2.
t.setTimeout(150_000)

t.test('replica lost (SIGKILL) mid-run: the run ends succeeded on the other replica, the retry in its events and record, one webhook', async t => {
  const id = 'lost-run'
  const { fleet, a, b, reader } = await firstAttemptOnA(t, id, '/work?first=stream', { firstEvents: 1 })
  a.sidecar.child.process.kill('SIGKILL')
  await a.sidecar.child.exited
  const events = await followToEnd(reader, 75_000) // lost within RUN_LOST_AFTER_SECONDS (30) + 30 s
  t.same(events.slice(0, -1).map(({ id, event, data }) => ({ id, event, data })), retriedEvents('replica lost', true),
    'attempt 1\'s event, the retry event, every event of attempt 2')
  t.match(JSON.parse(events.at(-1)?.data ?? '{}'), { run_id: id, status: 'succeeded', attempt: 2 })
  t.same(a.app.seen(id), [{ path: '/work', attempt: '1' }])
  t.same(b.app.seen(id), [{ path: '/work', attempt: '2' }], 'the other replica ran attempt 2 of the same run id')
  await checkRetriedOnce(t, fleet, b.sidecar, id, 'replica lost')
  t.equal(await retriesOn(b.sidecar, 'replica lost'), 1, 'counted by the replica that found it lost')
})
