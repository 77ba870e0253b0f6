import t from 'tap'
import { runsClient } from '../../helpers/runs-client.ts'
import { followToEnd, recordOn, retriesOn, retryFleet, submitRun, webhookDelivered, webhooksOf } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": a replica killed mid-run (SIGKILL: a spot VM
// reclaimed without a grace period) with the default heartbeat and RUN_LOST_AFTER_SECONDS: the
// other replica finds it lost, queues its run again instead of failing it, and runs attempt 2.
t.setTimeout(150_000)

t.test('replica lost (SIGKILL) mid-run: the run ends succeeded on the other replica, the retry in its events and record, one webhook', async t => {
  const fleet = await retryFleet(t)
  const a = await fleet.replica()
  const id = 'lost-run'
  t.equal((await submitRun(a.sidecar, `/work?first=stream&${fleet.hook}`, id)).status, 202)
  await a.app.waitForAttempt(id, '1')
  const b = await fleet.replica()
  const reader = await runsClient({ base: b.sidecar.base }).follow(id)
  await reader.waitForEvents(1)

  a.sidecar.child.process.kill('SIGKILL')
  await a.sidecar.child.exited
  const events = await followToEnd(reader, 75_000) // lost within RUN_LOST_AFTER_SECONDS (30) + 30 s
  t.same(events.slice(0, -1).map(({ id, event, data }) => ({ id, event, data })), [
    { id: '0', event: undefined, data: '{"attempt":1,"step":0}' },
    { id: '1', event: 'retry', data: '{"attempt":2,"reason":"replica lost"}' },
    { id: '2', event: undefined, data: '{"attempt":2,"step":0}' },
    { id: '3', event: undefined, data: '{"attempt":2,"step":1}' },
    { id: '4', event: undefined, data: '{"attempt":2,"step":2}' }
  ], 'attempt 1\'s event, the retry event, every event of attempt 2')
  t.match(JSON.parse(events.at(-1)?.data ?? '{}'), { run_id: id, status: 'succeeded', attempt: 2 })

  t.same(a.app.seen(id), [{ path: '/work', attempt: '1' }])
  t.same(b.app.seen(id), [{ path: '/work', attempt: '2' }], 'the other replica ran attempt 2 of the same run id')
  await webhookDelivered(b.sidecar, id)
  const record = await recordOn(b.sidecar, id)
  t.match(record, {
    status: 'succeeded', status_code: 200, attempt: 2, result: [{ attempt: 2, step: 0 }, { attempt: 2, step: 1 }, { attempt: 2, step: 2 }],
    interruptions: [{ attempt: 1, reason: 'replica lost', at: /^\d{4}-\d\d-\d\dT/ }], webhook: { status: 'delivered', attempts: 1 }
  })
  t.equal(record.interruptions?.length, 1)
  t.equal(webhooksOf(fleet.receiver, id).length, 1, 'one webhook')
  t.equal(await retriesOn(b.sidecar, 'replica lost'), 1, 'counted by the replica that found it lost')
})
