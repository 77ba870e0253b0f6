import t from 'tap'
import { send } from '../../helpers/http-client.ts'
import { runsClient, type RunRecordBody } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import { type Replica, retriesOn, retryFleet, submitRun, webhookDelivered, webhooksOf } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": with RUN_MAX_ATTEMPTS=3 on two replicas,
// nothing but an interrupted attempt is run again: an app's answer (a 500), a deadline, a cancel,
// a sync call whose app was unreachable (keyed or not) each reach the app once and end as before.
t.setTimeout(60_000)

t.test('nothing else is run again', async t => {
  const fleet = await retryFleet(t)
  const replicas: Replica[] = [await fleet.replica(), await fleet.replica()]
  const [a] = replicas as [Replica, Replica]
  const seen = (id: string): Array<{ path: string, attempt: string | null }> => replicas.flatMap(replica => replica.app.seen(id))
  const ended = async (id: string): Promise<RunRecordBody> => (await runsClient({ base: a.sidecar.base }).finished(id, 15_000)).record
  /** The run's events once it has ended: its `done` alone, no retry event. */
  const eventsOf = async (id: string): Promise<string> => (await send(runsClient({ base: a.sidecar.base }).runUrl(id, '/events'))).body.toString()

  t.test('an app\'s answer, a 500: failed, once', async t => {
    t.equal((await submitRun(a.sidecar, `/fail?${fleet.hook}`, 'answered-500')).status, 202)
    const record = await ended('answered-500')
    t.match(record, { status: 'failed', status_code: 500, result: { error: 'boom' }, error: { message: 'app answered 500' }, attempt: 1 })
    t.equal(record.interruptions, undefined)
    t.same(seen('answered-500'), [{ path: '/fail', attempt: '1' }])
    t.notMatch(await eventsOf('answered-500'), /event: retry/)
    await webhookDelivered(a.sidecar, 'answered-500')
    t.match(webhooksOf(fleet.receiver, 'answered-500'), [{ status_code: 500 }])
  })

  t.test('a deadline (Cancel-After: 1) at the app: failed 504, once', async t => {
    t.equal((await submitRun(a.sidecar, `/hold?${fleet.hook}`, 'past-deadline', { 'cancel-after': '1' })).status, 202)
    const record = await ended('past-deadline')
    t.match(record, { status: 'failed', status_code: 504, error: { message: 'deadline passed' }, attempt: 1 })
    t.equal(record.interruptions, undefined)
    t.same(seen('past-deadline'), [{ path: '/hold', attempt: '1' }])
    t.notMatch(await eventsOf('past-deadline'), /event: retry/)
    await webhookDelivered(a.sidecar, 'past-deadline')
    t.match(webhooksOf(fleet.receiver, 'past-deadline'), [{ status_code: 504 }])
  })

  t.test('a cancel at the app: canceled, once', async t => {
    t.equal((await submitRun(a.sidecar, `/hold?${fleet.hook}`, 'canceled-run')).status, 202)
    await eventually(() => seen('canceled-run').length === 1, 10_000)
    t.equal((await runsClient({ base: a.sidecar.base }).cancel('canceled-run')).status, 200)
    const record = await ended('canceled-run')
    t.match(record, { status: 'canceled', status_code: 499, attempt: 1 })
    t.equal(record.interruptions, undefined)
    t.same(seen('canceled-run'), [{ path: '/hold', attempt: '1' }])
    await webhookDelivered(a.sidecar, 'canceled-run')
    t.match(webhooksOf(fleet.receiver, 'canceled-run'), [{ status_code: 499 }])
  })

  t.test('a sync call whose app was unreachable before it answered: 502 to its caller, once; keyed or not', async t => {
    const client = runsClient({ base: a.sidecar.base })
    const plain = await client.call('/reset', { headers: { 'x-request-id': 'sync-reset' } })
    t.equal(plain.status, 502)
    t.same(seen('sync-reset'), [{ path: '/reset', attempt: null }], 'a sync call is no run: no X-Run-Attempt')
    const keyed = await client.call('/reset', { headers: { 'x-request-id': 'keyed-reset', 'idempotency-key': 'reset-once' } })
    t.equal(keyed.status, 502)
    const record = await ended('keyed-reset')
    t.match(record, { status: 'failed', status_code: 502 })
    t.same([record.attempt, record.interruptions], [undefined, undefined], 'a recorded sync call counts no attempts')
    const replay = await client.call('/reset', { headers: { 'x-request-id': 'keyed-again', 'idempotency-key': 'reset-once' } })
    t.same([replay.status, replay.headers['idempotent-replayed']], [502, 'true'], 'its retry gets the kept answer')
    t.same(seen('keyed-reset'), [{ path: '/reset', attempt: null }])
    t.same(seen('keyed-again'), [])
  })

  for (const replica of replicas) {
    for (const reason of ['replica stopped', 'replica lost', 'app unreachable']) t.equal(await retriesOn(replica.sidecar, reason), 0, `${reason}: none put back`)
  }
})
