import t from 'tap'
import { send } from '../../helpers/http-client.ts'
import { runsClient, type RunRecordBody } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import { type Replica, retriesOn, retryFleet, submitRun, webhookDelivered, webhooksOf } from './retry-fleet.ts'

// docs/runs.md, "Running on interruptible capacity": with RUN_MAX_ATTEMPTS=3 on two replicas,
// nothing but an interrupted attempt is run again: an app's answer (a 500), a deadline, a cancel,
// a sync call whose app was unreachable (keyed or not, or with a `Prefer: wait` not run out), a
// deadline of a `Prefer: wait` call gone on as a run, each reach the app once and end as before.

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

t.test('nothing else is run again', async t => {
  const fleet = await retryFleet(t)
  const replicas: Replica[] = [await fleet.replica(), await fleet.replica()]
  const [a] = replicas as [Replica, Replica]
  const seen = (id: string): Array<{ path: string, attempt: string | null }> => replicas.flatMap(replica => replica.app.seen(id))
  // what an app saw comes on its stdout, which may reach the test after the answer did (a loaded machine)
  const seenOnce = async (id: string): Promise<Array<{ path: string, attempt: string | null }>> => {
    await eventually(() => seen(id).length > 0)
    return seen(id)
  }
  const ended = async (id: string): Promise<RunRecordBody> => (await runsClient({ base: a.sidecar.base }).finished(id, 15_000)).record
  /** The run's events once it has ended: its `done` alone, no retry event. */
  const eventsOf = async (id: string): Promise<string> => (await send(runsClient({ base: a.sidecar.base }).runUrl(id, '/events'))).body.toString()

  /**
   * An async run of `path` (`headers` on top; `during`: what the test does while it runs) ends at
   * attempt 1 as `expected` says, never interrupted: the app saw it once, its events hold no retry
   * event, and its one webhook reports its status.
   */
  const endsOnce = async (t: Tap, id: string, path: string, expected: Partial<RunRecordBody>, options: { headers?: Record<string, string>, during?: () => Promise<void> } = {}): Promise<void> => {
    t.equal((await submitRun(a.sidecar, `${path}?${fleet.hook}`, id, options.headers)).status, 202)
    await options.during?.()
    const record = await ended(id)
    t.match(record, { ...expected, attempt: 1 })
    t.equal(record.interruptions, undefined)
    t.same(await seenOnce(id), [{ path, attempt: '1' }], 'the app saw it once')
    t.notMatch(await eventsOf(id), /event: retry/)
    await webhookDelivered(a.sidecar, id)
    t.match(webhooksOf(fleet.receiver, id), [{ status_code: expected.status_code }])
  }

  t.test('an app\'s answer, a 500: failed, once', async t => {
    await endsOnce(t, 'answered-500', '/fail', { status: 'failed', status_code: 500, result: { error: 'boom' }, error: { message: 'app answered 500' } })
  })

  t.test('a deadline (Cancel-After: 1) at the app: failed 504, once', async t => {
    await endsOnce(t, 'past-deadline', '/hold', { status: 'failed', status_code: 504, error: { message: 'deadline passed' } }, { headers: { 'cancel-after': '1' } })
  })

  t.test('a cancel at the app: canceled, once', async t => {
    await endsOnce(t, 'canceled-run', '/hold', { status: 'canceled', status_code: 499 }, {
      during: async () => {
        await eventually(() => seen('canceled-run').length === 1, 10_000)
        t.equal((await runsClient({ base: a.sidecar.base }).cancel('canceled-run')).status, 200)
      }
    })
  })

  t.test('a sync call whose app was unreachable before it answered: 502 to its caller, once; keyed or not', async t => {
    const client = runsClient({ base: a.sidecar.base })
    const plain = await client.call('/reset', { headers: { 'x-request-id': 'sync-reset' } })
    t.equal(plain.status, 502)
    t.same(await seenOnce('sync-reset'), [{ path: '/reset', attempt: null }], 'a sync call is no run: no X-Run-Attempt')
    const keyed = await client.call('/reset', { headers: { 'x-request-id': 'keyed-reset', 'idempotency-key': 'reset-once' } })
    t.equal(keyed.status, 502)
    const record = await ended('keyed-reset')
    t.match(record, { status: 'failed', status_code: 502 })
    t.same([record.attempt, record.interruptions], [undefined, undefined], 'a recorded sync call counts no attempts')
    const replay = await client.call('/reset', { headers: { 'x-request-id': 'keyed-again', 'idempotency-key': 'reset-once' } })
    t.same([replay.status, replay.headers['idempotent-replayed']], [502, 'true'], 'its retry gets the kept answer')
    t.same(await seenOnce('keyed-reset'), [{ path: '/reset', attempt: null }])
    t.same(seen('keyed-again'), [])
  })

  t.test('a Prefer: wait call: unreachable before its wait ran out, 502 to its caller, once; gone on as a run, its deadline ends it, once', async t => {
    const client = runsClient({ base: a.sidecar.base })
    const reset = await client.call('/reset', { headers: { 'x-request-id': 'wait-reset', prefer: 'wait=5' } })
    t.equal(reset.status, 502)
    t.same(await seenOnce('wait-reset'), [{ path: '/reset', attempt: '1' }], 'sent as attempt 1 (it might have become a run), never again')
    t.equal((await send(client.runUrl('wait-reset'))).status, 404, 'never a run')
    const waited = await client.call(`/hold?${fleet.hook}`, { headers: { 'x-request-id': 'wait-deadline', prefer: 'wait=1', 'cancel-after': '2' } })
    t.same([waited.status, waited.json()], [202, { run_id: 'wait-deadline', status: 'running' }])
    const record = await ended('wait-deadline')
    t.match(record, { status: 'failed', status_code: 504, attempt: 1, error: { message: 'request exceeded its deadline of 2s' } })
    t.equal(record.interruptions, undefined)
    t.same(await seenOnce('wait-deadline'), [{ path: '/hold', attempt: '1' }])
    t.notMatch(await eventsOf('wait-deadline'), /event: retry/)
    await webhookDelivered(a.sidecar, 'wait-deadline')
    t.match(webhooksOf(fleet.receiver, 'wait-deadline'), [{ status_code: 504 }])
  })

  for (const replica of replicas) {
    for (const reason of ['replica stopped', 'replica lost', 'app unreachable']) t.equal(await retriesOn(replica.sidecar, reason), 0, `${reason}: none put back`)
  }
})
