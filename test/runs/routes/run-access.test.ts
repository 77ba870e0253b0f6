import t from 'tap'
import { runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { accessFleet, assertHidden, BACKENDS, eventsOf, listOf, NO_SUCH_RUN, pageOf } from './run-access-kit.ts'

// RUN_ACCESS (docs/runs.md, "Who may see a run: `RUN_ACCESS`"): with `caller`, a recorded run is
// read, followed and canceled by the sub that made it alone (an async submit, an Idempotency-Key,
// a `Prefer: wait` that ran out), and another caller's run is answered as one never recorded; a
// call in flight is canceled by its own caller alone, on any replica. With `project` (the
// default), any token of the project does all of it. In memory and across two replicas sharing Redis.

const CANCELED = '{"message":"run canceled"}'

for (const backend of BACKENDS) {
  t.test(`${backend}, caller: each caller reads, follows and cancels the runs it made, however recorded; another's is a run never recorded`, async t => {
    const { app, as } = await accessFleet(t, backend, { RUN_ACCESS: 'caller' })
    const alice = as('alice', 0)
    const bob = as('bob', 1)
    t.equal((await alice.submit('/json/a', 'a-async')).status, 202, 'an async submit')
    const keyed = await alice.call('/json/k', { headers: { 'idempotency-key': 'k-1', 'x-request-id': 'a-keyed' }, body: '{}' })
    t.equal(keyed.status, 200, 'a sync call with an Idempotency-Key')
    t.equal((await bob.submit('/json/b', 'b-keyed-async', { headers: { 'idempotency-key': 'k-1' } })).status, 202, 'an async submit with a key (another caller: its own key)')
    const waiting = bob.call('/hold/w', { headers: { prefer: 'wait=1', 'x-request-id': 'b-wait' }, body: '{}' })
    const held = await app.waitForHeld(1)
    const ranOut = await waiting
    t.equal(ranOut.status, 202)
    t.equal(ranOut.text, '{"run_id":"b-wait","status":"running"}', 'a Prefer: wait that ran out at the app goes on as a run')

    // while it runs, on either replica: alice can neither see it nor cancel it
    await assertHidden(t, alice, 'b-wait')
    await assertHidden(t, as('alice', 1), 'b-wait')
    t.equal(held.wasCut(), false, 'alice\'s cancel did not reach the app request')
    t.equal((await bob.read('b-wait')).record.status, 'running')
    held.res.writeHead(200, { 'content-type': 'application/json' }).end('{"done":true}')

    const mine = { alice: ['a-keyed', 'a-async'], bob: ['b-wait', 'b-keyed-async'] } as const
    for (const [who, ids] of Object.entries(mine) as Array<['alice' | 'bob', readonly string[]]>) {
      for (const id of ids) {
        const own = await as(who, 0).finished(id)
        t.equal(own.record.status, 'succeeded', `${who} reads ${id}`)
        t.notMatch(own.response.text, /"sub"|alice|bob/, 'the record does not show who made it')
        const events = await eventsOf(as(who, 1), id)
        t.equal(events.status, 200)
        t.match(events.text, `id: ${id}.done\nevent: done\n`, `${who} follows ${id} on the other replica`)
        const cancel = await as(who, 1).cancel(id)
        t.equal(cancel.status, 409, `${who}'s own finished run: 409`)
        t.equal(cancel.text, '{"message":"run already finished"}')
        for (const i of [0, 1]) await assertHidden(t, as(who === 'alice' ? 'bob' : 'alice', i), id)
      }
      const page = await listOf(as(who, 1))
      t.equal(page.status, 200)
      t.same(pageOf(page), { ids, next: null }, `${who} lists its own runs alone`)
    }
  })

  t.test(`${backend}, caller: a call in flight is canceled by its own caller alone, on either replica`, async t => {
    const { app, as } = await accessFleet(t, backend, { RUN_ACCESS: 'caller' })
    const pending = as('bob', 0).call('/hold/plain', { headers: { 'x-request-id': 'b-plain' } })
    const held = await app.waitForHeld(1)
    for (const i of [0, 1]) {
      const other = await as('alice', i).cancel('b-plain')
      t.equal(other.status, 404, `alice's cancel through replica ${i}`)
      t.equal(other.text, NO_SUCH_RUN)
    }
    t.equal(held.wasCut(), false, 'the call goes on')
    const own = await as('bob', 1).cancel('b-plain')
    t.equal(own.status, 200)
    t.equal(own.text, '{"run_id":"b-plain","status":"canceled"}')
    const answer = await pending
    t.equal(answer.status, 499)
    t.equal(answer.text, CANCELED)
    await held.cut
  })

  t.test(`${backend}, project (the default): every token of the project reads, lists and cancels every run`, async t => {
    const { app, as } = await accessFleet(t, backend)
    t.equal((await as('alice', 0).submit('/json/a', 'a-1')).status, 202)
    t.equal((await as('bob', 1).submit('/json/b', 'b-1')).status, 202)
    t.equal((await as('bob', 1).submit('/hold/b', 'b-held')).status, 202)
    const held = await app.waitForHeld(1)
    for (const id of ['a-1', 'b-1']) {
      const own = await as(id.startsWith('a') ? 'alice' : 'bob', 0).finished(id)
      const other = await as(id.startsWith('a') ? 'bob' : 'alice', 1).finished(id)
      t.equal(other.response.text, own.response.text, `${id}: the other caller reads the same record`)
    }
    for (const who of ['alice', 'bob'] as const) {
      t.same(pageOf(await listOf(as(who, 0))), { ids: ['b-held', 'b-1', 'a-1'], next: null }, `${who} lists every run`)
    }
    const canceled = await as('alice', 0).cancel('b-held')
    t.equal(canceled.status, 200, 'alice cancels bob\'s running run')
    t.match(canceled.json(), { run_id: 'b-held', status: 'canceled' })
    await held.cut
    const pending = as('bob', 0).call('/hold/plain', { headers: { 'x-request-id': 'b-plain' } })
    await app.waitForHeld(2)
    t.equal((await as('alice', 1).cancel('b-plain')).text, '{"run_id":"b-plain","status":"canceled"}', 'and bob\'s call in flight')
    t.equal((await pending).status, 499)
  })
}

t.test('caller, auth off: every call is the same caller, so every run is its own', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUN_ACCESS: 'caller' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json/x', 'open-1')).status, 202)
  t.equal((await client.finished('open-1')).record.status, 'succeeded')
  t.same(pageOf(await listOf(client)), { ids: ['open-1'], next: null })
})
