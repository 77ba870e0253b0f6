import t from 'tap'
import { runsClient } from '../../helpers/runs-client.ts'
import { followToEnd, recordOn, retryFleet, submitRun, webhookDelivered, webhooksOf } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": a replica stopped (SIGTERM, a grace period of
// 1 s) while an async run streams at its app: the run is cut at the grace period's end, queued
// again, and runs again on the other replica, the app told attempt 2 of the same run; a reader on
// the other replica sees attempt 1's event, the retry event and every event of attempt 2.
t.setTimeout(60_000)

t.test('replica stopped mid-run: the run ends succeeded on the other replica, the retry in its events and record, one webhook', async t => {
  const fleet = await retryFleet(t)
  const a = await fleet.replica({ RESPONSE_GRACE_PERIOD_SECONDS: '1' })
  const id = 'stopped-run'
  const submitted = await submitRun(a.sidecar, `/work?first=stream&${fleet.hook}`, id, { 'content-type': 'application/json' })
  t.equal(submitted.status, 202)
  await a.app.waitForAttempt(id, '1')
  const b = await fleet.replica() // up once attempt 1 runs on a: the run cannot start on b first
  const reader = await runsClient({ base: b.sidecar.base }).follow(id)
  await reader.waitForEvents(1)

  const requeued = a.sidecar.child.waitForLine(line => line.msg === 'async run interrupted: queued again for its next attempt', 10_000)
  a.sidecar.child.process.kill('SIGTERM')
  t.match(await requeued, { runId: id, attempt: 1, reason: 'replica stopped' }, 'a puts it back at its grace period\'s end')
  t.equal(await a.sidecar.child.exited, 0)

  const events = await followToEnd(reader)
  t.same(events.slice(0, -1).map(({ id, event, data }) => ({ id, event, data })), [
    { id: '0', event: undefined, data: '{"attempt":1,"step":0}' },
    { id: '1', event: 'retry', data: '{"attempt":2,"reason":"replica stopped"}' },
    { id: '2', event: undefined, data: '{"attempt":2,"step":0}' },
    { id: '3', event: undefined, data: '{"attempt":2,"step":1}' },
    { id: '4', event: undefined, data: '{"attempt":2,"step":2}' }
  ], 'attempt 1\'s event, the retry event (an id of its own), every event of attempt 2, ids rising')
  const done = JSON.parse(events.at(-1)?.data ?? '{}') as Record<string, unknown>
  t.match(done, { run_id: id, status: 'succeeded', status_code: 200, attempt: 2 })

  t.same(a.app.seen(id), [{ path: '/work', attempt: '1' }], 'a\'s app saw attempt 1')
  t.same(b.app.seen(id), [{ path: '/work', attempt: '2' }], 'b\'s app saw attempt 2 of the same run id')
  await webhookDelivered(b.sidecar, id)
  const record = await recordOn(b.sidecar, id)
  t.match(record, {
    status: 'succeeded', status_code: 200, attempt: 2, result: [{ attempt: 2, step: 0 }, { attempt: 2, step: 1 }, { attempt: 2, step: 2 }],
    interruptions: [{ attempt: 1, reason: 'replica stopped', at: /^\d{4}-\d\d-\d\dT/ }], webhook: { status: 'delivered', attempts: 1 }
  })
  t.equal(record.interruptions?.length, 1)
  t.notOk(record.error, 'no error: it succeeded')
  t.ok(Date.parse(record.started_at as string) >= Date.parse(record.interruptions?.[0]?.at as string), 'started_at is the last attempt\'s')
  const sinceCreated = Date.parse(record.started_at as string) - Date.parse(record.created_at)
  t.ok((record.queue_time_ms as number) >= 0 && (record.queue_time_ms as number) < sinceCreated, `queue_time_ms ${record.queue_time_ms}: the waits, not attempt 1's time at the app`)
  const hooks = webhooksOf(fleet.receiver, id)
  t.equal(hooks.length, 1, 'one webhook, at the final outcome')
  t.match(hooks[0], { run_id: id, status_code: 200, result: [{ attempt: 2, step: 0 }, { attempt: 2, step: 1 }, { attempt: 2, step: 2 }] })

  const resumed = await runsClient({ base: b.sidecar.base }).follow(id, { headers: { 'last-event-id': '1' } })
  await followToEnd(resumed)
  t.same(resumed.events.slice(0, -1).map(({ id }) => id), ['2', '3', '4'], 'Last-Event-ID past the retry event resumes in attempt 2')
})
