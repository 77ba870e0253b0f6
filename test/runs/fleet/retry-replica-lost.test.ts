import t from 'tap'
import { send } from '../../helpers/http-client.ts'
import { runsClient } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import { checkRetriedOnce, firstAttemptOnA, followToEnd, recordOn, retriedEvents, retriesOn, submitRun, webhookDelivered, webhooksOf } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity", with the default heartbeat and
// RUN_LOST_AFTER_SECONDS. A replica killed mid-run (SIGKILL: a spot VM reclaimed without a grace
// period): the other replica finds it lost, queues its run again instead of failing it, and runs
// attempt 2. Fencing: a replica paused (SIGSTOP) past RUN_LOST_AFTER_SECONDS is taken for lost,
// and its run runs again on the other replica; when it resumes and its app ends attempt 1 after
// all, that late answer and its late event are refused: the record, the events and the one
// webhook stay as attempt 2 left them.
// each subtest waits out the lost window on a fleet of its own: they wait side by side
t.jobs = 2

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

t.test('replica paused past RUN_LOST_AFTER_SECONDS, then resumed with attempt 1\'s answer: refused, attempt 2 stands', async t => {
  const id = 'paused-run'
  const { fleet, a, b, reader } = await firstAttemptOnA(t, id, '/work?first=stream', { firstEvents: 1 })
  a.sidecar.child.process.kill('SIGSTOP')
  t.teardown(() => { a.sidecar.child.process.kill('SIGCONT') })
  const events = await followToEnd(reader, 75_000)
  t.same(events.slice(0, -1).map(({ id, event }) => `${id}${event === undefined ? '' : ` ${event}`}`), ['0', '1 retry', '2', '3', '4'])
  t.equal(events[1]?.data, '{"attempt":2,"reason":"replica lost"}')
  await webhookDelivered(b.sidecar, id)
  const decided = await recordOn(b.sidecar, id)
  t.match(decided, { status: 'succeeded', attempt: 2, interruptions: [{ attempt: 1, reason: 'replica lost' }] })
  const decidedEvents = (await send(runsClient({ base: b.sidecar.base }).runUrl(id, '/events'))).body.toString()

  // a resumes; its app goes on with attempt 1: one more event, then its answer
  const refused = a.sidecar.child.waitForLine(line => line.runId === id &&
    line.msg === 'async run ended by another replica meanwhile (this one was taken for lost): its answer here is not recorded, no webhook sent', 30_000)
  a.sidecar.child.process.kill('SIGCONT')
  t.same((await send(`${a.app.url}/release`, { method: 'POST' })).json(), { released: 1 })
  t.match(await refused, { status: 'succeeded' }, 'attempt 1\'s late answer is not recorded')
  // a serves again and has caught up: a run submitted to it runs and ends
  t.equal((await submitRun(a.sidecar, '/fail', 'after-pause')).status, 202)
  await eventually(async () => (await recordOn(a.sidecar, 'after-pause')).status === 'failed', 15_000)

  t.same(await recordOn(a.sidecar, id), decided, 'the record as attempt 2 left it, read on the resumed replica')
  t.same(await recordOn(b.sidecar, id), decided)
  t.equal((await send(runsClient({ base: b.sidecar.base }).runUrl(id, '/events'))).body.toString(), decidedEvents, 'no late event appended')
  t.equal(webhooksOf(fleet.receiver, id).length, 1, 'one webhook')
  t.same(a.app.seen(id), [{ path: '/work', attempt: '1' }])
  t.same(b.app.seen(id), [{ path: '/work', attempt: '2' }])
})
