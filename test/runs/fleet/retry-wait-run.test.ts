import { createHash } from 'node:crypto'
import t, { type Test } from 'tap'
import { runsClient } from '../../helpers/runs-client.ts'
import type { OpenStream } from '../../stream/sse-test-kit.ts'
import { checkRetriedOnce, followToEnd, type Replica, retriedEvents, retriesOn, retryFleet, type RetryFleet, webhookDelivered, webhooksOf, recordOn } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": a `Prefer: wait` call whose wait ran out at
// the app goes on as an async run, and is retried as one. Each case: replica `a` has the call at
// its app (held before any answer) when the wait runs out (202 running); `b` starts beside it and
// a reader follows the run there; then `a` is interrupted one way. The app sees attempt 1 (on the
// call) and attempt 2 (on `b`) with one run id and the same body, a body too large to have been
// read whole for a plain call (it streamed), kept whole for the run.
t.jobs = 4

const BODY = Buffer.alloc(100 * 1024, 'checkpointed input ')
const BODY_SHA = createHash('sha256').update(BODY).digest('hex')

interface WaitRunOnA {
  readonly fleet: RetryFleet
  readonly a: Replica
  readonly b: Replica
  readonly reader: OpenStream
}

async function waitRunOnA (t: Test, id: string, options: { aEnv?: Record<string, string>, env?: Record<string, string> } = {}): Promise<WaitRunOnA> {
  const fleet = await retryFleet(t)
  const a = await fleet.replica({ ...options.env, ...options.aEnv })
  const answer = await runsClient({ base: a.sidecar.base }).call(`/work?first=hold&${fleet.hook}`, {
    headers: { 'x-request-id': id, prefer: 'wait=1', 'content-type': 'application/octet-stream' }, body: BODY
  })
  t.equal(answer.status, 202, 'the wait ran out at the app')
  t.same(answer.json(), { run_id: id, status: 'running' })
  t.equal(answer.headers['preference-applied'], 'wait=1')
  const b = await fleet.replica(options.env)
  const reader = await runsClient({ base: b.sidecar.base }).follow(id)
  return { fleet, a, b, reader }
}

/**
 * The run retried once for `reason` as the reader on `b` saw it (within `ms`): the retry event and
 * attempt 2's events; attempt 1 on `a` (the call), attempt 2 on `b`, one run id, the same path and
 * body; its record and one webhook.
 */
async function checkRetried (t: Test, { fleet, a, b, reader }: WaitRunOnA, id: string, reason: string, ms?: number): Promise<void> {
  const events = await followToEnd(reader, ms)
  t.same(events.slice(0, -1).map(({ id, event, data }) => ({ id, event, data })), retriedEvents(reason, false))
  t.same(a.app.seen(id), [{ path: '/work', attempt: '1' }], 'a\'s app saw the call as attempt 1')
  t.same(b.app.seen(id), [{ path: '/work', attempt: '2' }], 'b\'s app saw attempt 2 of the same run id')
  t.same([...a.app.bodies(id), ...b.app.bodies(id)], [BODY_SHA, BODY_SHA], 'the same body both times')
  await checkRetriedOnce(t, fleet, b.sidecar, id, reason)
}

t.test('replica stopped: the run ends succeeded on the other replica, one webhook', async t => {
  const id = 'wait-stopped'
  const fleet = await waitRunOnA(t, id, { aEnv: { RESPONSE_GRACE_PERIOD_SECONDS: '1' } })
  const { a } = fleet
  const requeued = a.sidecar.child.waitForLine(line => line.msg === 'async run interrupted: queued again for its next attempt', 10_000)
  a.sidecar.child.process.kill('SIGTERM')
  t.match(await requeued, { runId: id, attempt: 1, reason: 'replica stopped' })
  t.equal(await a.sidecar.child.exited, 0)
  await checkRetried(t, fleet, id, 'replica stopped')
})

t.test('replica lost (SIGKILL): the other replica queues it again and runs it, one webhook', async t => {
  const id = 'wait-lost'
  const fleet = await waitRunOnA(t, id)
  fleet.a.sidecar.child.process.kill('SIGKILL')
  await fleet.a.sidecar.child.exited
  await checkRetried(t, fleet, id, 'replica lost', 75_000) // lost within RUN_LOST_AFTER_SECONDS (30) + 30 s
  t.equal(await retriesOn(fleet.b.sidecar, 'replica lost'), 1, 'counted by the replica that found it lost')
})

t.test('app unreachable (its process killed): queued again by its own replica, run by the other, one webhook', async t => {
  const id = 'wait-crashed'
  const fleet = await waitRunOnA(t, id)
  await fleet.a.app.kill()
  await checkRetried(t, fleet, id, 'app unreachable')
  t.equal(await retriesOn(fleet.a.sidecar, 'app unreachable'), 1, 'counted by the replica that put it back')
})

t.test('RUN_MAX_ATTEMPTS=1, replica lost: the run ends failed 502 replica lost (not left running), one webhook, never run again', async t => {
  const id = 'wait-lost-once'
  const { fleet, a, b, reader } = await waitRunOnA(t, id, { env: { RUN_MAX_ATTEMPTS: '1' } })
  a.sidecar.child.process.kill('SIGKILL')
  await a.sidecar.child.exited
  const events = await followToEnd(reader, 75_000)
  t.same(events.slice(0, -1), [], 'no event')
  await webhookDelivered(b.sidecar, id)
  t.match(await recordOn(b.sidecar, id), { status: 'failed', status_code: 502, result: { message: 'replica lost' }, webhook: { status: 'delivered', attempts: 1 } })
  t.match(webhooksOf(fleet.receiver, id), [{ run_id: id, status_code: 502, result: { message: 'replica lost' } }])
  t.equal(webhooksOf(fleet.receiver, id).length, 1)
  t.same(a.app.seen(id), [{ path: '/work', attempt: null }], 'no X-Run-Attempt with RUN_MAX_ATTEMPTS 1')
  t.same(b.app.seen(id), [], 'never run again')
})
