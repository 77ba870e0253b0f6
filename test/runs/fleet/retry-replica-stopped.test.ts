import t from 'tap'
import { runsClient } from '../../helpers/runs-client.ts'
import { checkRetriedOnce, firstAttemptOnA, followToEnd, retriedEvents } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": a replica stopped (SIGTERM, a grace period of
// 1 s) while an async run streams at its app: the run is cut at the grace period's end, queued
// again, and runs again on the other replica, the app told attempt 2 of the same run; a reader on
// the other replica sees attempt 1's event, the retry event and every event of attempt 2.

t.test('replica stopped mid-run: the run ends succeeded on the other replica, the retry in its events and record, one webhook', async t => {
  const id = 'stopped-run'
  const { fleet, a, b, reader } = await firstAttemptOnA(t, id, '/work?first=stream', { aEnv: { RESPONSE_GRACE_PERIOD_SECONDS: '1' }, firstEvents: 1 })
  const requeued = a.sidecar.child.waitForLine(line => line.msg === 'async run interrupted: queued again for its next attempt', 10_000)
  a.sidecar.child.process.kill('SIGTERM')
  t.match(await requeued, { runId: id, attempt: 1, reason: 'replica stopped' }, 'a puts it back at its grace period\'s end')
  t.equal(await a.sidecar.child.exited, 0)

  const events = await followToEnd(reader)
  t.same(events.slice(0, -1).map(({ id, event, data }) => ({ id, event, data })), retriedEvents('replica stopped', true),
    'attempt 1\'s event, the retry event (an id of its own), every event of attempt 2, ids rising')
  t.match(JSON.parse(events.at(-1)?.data ?? '{}'), { run_id: id, status: 'succeeded', status_code: 200, attempt: 2 })
  t.same(a.app.seen(id), [{ path: '/work', attempt: '1' }], 'a\'s app saw attempt 1')
  t.same(b.app.seen(id), [{ path: '/work', attempt: '2' }], 'b\'s app saw attempt 2 of the same run id')

  const record = await checkRetriedOnce(t, fleet, b.sidecar, id, 'replica stopped')
  t.ok(Date.parse(record.started_at as string) >= Date.parse(record.interruptions?.[0]?.at as string), 'started_at is the last attempt\'s')
  const sinceCreated = Date.parse(record.started_at as string) - Date.parse(record.created_at)
  t.ok((record.queue_time_ms as number) >= 0 && (record.queue_time_ms as number) < sinceCreated, `queue_time_ms ${record.queue_time_ms}: the waits, not attempt 1's time at the app`)
  const resumed = await runsClient({ base: b.sidecar.base }).follow(id, { headers: { 'last-event-id': '1' } })
  await followToEnd(resumed)
  t.same(resumed.events.slice(0, -1).map(({ id }) => id), ['2', '3', '4'], 'Last-Event-ID past the retry event resumes in attempt 2')
})
