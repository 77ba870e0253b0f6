import t from 'tap'
import { checkRetriedOnce, firstAttemptOnA, followToEnd, recordOn, retriedEvents, retriesOn } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": the app process dies (SIGKILL, as a GPU
// process crashing out of memory) holding an async run before it answered: its sidecar's 502 "app
// unreachable" interrupts the attempt, the run goes back to the queue and the other replica, which
// has a free slot, takes it (the one that lost it passes it over), the app told attempt 2.

t.test('app unreachable before it answered: the run ends succeeded on the other replica, the retry in its events and record, one webhook', async t => {
  const id = 'crashed-run'
  const { fleet, a, b, reader } = await firstAttemptOnA(t, id, '/work?first=hold')
  t.equal(await retriesOn(a.sidecar, 'app unreachable'), 0, 'shown at 0 from the start')
  await a.app.kill()
  const events = await followToEnd(reader)
  t.same(events.slice(0, -1).map(({ id, event, data }) => ({ id, event, data })), retriedEvents('app unreachable', false),
    'the retry event (attempt 1 had none), then every event of attempt 2')
  t.match(JSON.parse(events.at(-1)?.data ?? '{}'), { run_id: id, status: 'succeeded', attempt: 2 })
  t.same(a.app.seen(id), [{ path: '/work', attempt: '1' }])
  t.same(b.app.seen(id), [{ path: '/work', attempt: '2' }], 'the other replica ran attempt 2 of the same run id')

  const record = await checkRetriedOnce(t, fleet, b.sidecar, id, 'app unreachable')
  t.same(await recordOn(a.sidecar, id), record, 'read on either replica')
  t.equal(await retriesOn(a.sidecar, 'app unreachable'), 1, 'counted by the replica that put it back')
  t.equal(await retriesOn(b.sidecar, 'app unreachable'), 0)
  t.match(await a.sidecar.child.waitForLine(line => line.msg === 'async run interrupted: queued again for its next attempt'), { runId: id, attempt: 1, reason: 'app unreachable' })
})
