import t from 'tap'
import { runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { accessFleet, allPages, assertHidden, BACKENDS, listOf, pageOf } from './run-access-kit.ts'

// RUN_ACCESS=caller and the app's runs as a whole (docs/runs.md, "Who may see a run:
// `RUN_ACCESS`"): a caller's list pages through its own runs alone (each page full, its cursor
// right, whatever the others' runs between them), its purge cancels its own queued runs alone, and
// a run recorded without its sub (by an older version) is nobody's. In memory and across two
// replicas sharing Redis.

/** `r-00` … `r-19`, in that order: alice's every third (`r-09` fails), bob's the rest. */
const RUNS = Array.from({ length: 20 }, (_, i) => ({ id: `r-${String(i).padStart(2, '0')}`, who: i % 3 === 0 ? 'alice' as const : 'bob' as const }))
const idsOf = (who: 'alice' | 'bob'): string[] => RUNS.filter(run => run.who === who).map(run => run.id).reverse()

for (const backend of BACKENDS) {
  t.test(`${backend}, caller: each caller's list pages through its own runs alone, among the other's`, async t => {
    const { as } = await accessFleet(t, backend, { RUN_ACCESS: 'caller' })
    for (const [i, { id, who }] of RUNS.entries()) {
      t.equal((await as(who, i).submit(id === 'r-09' ? '/status/500' : '/json/x', id)).status, 202)
    }
    for (const { id, who } of RUNS) await as(who).finished(id)
    const alice = idsOf('alice')
    const bob = idsOf('bob')
    t.same(await allPages(t, as('alice', 0), 3), [alice.slice(0, 3), alice.slice(3, 6), alice.slice(6)], 'alice: 7 runs, 3 a page')
    t.same(await allPages(t, as('bob', 1), 5), [bob.slice(0, 5), bob.slice(5, 10), bob.slice(10)], 'bob: 13 runs, 5 a page')
    t.same(await allPages(t, as('bob', 0), 13), [bob], 'a page of exactly what is left: nothing follows')
    t.same(await allPages(t, as('alice', 1), 4, 'succeeded'), [['r-18', 'r-15', 'r-12', 'r-06'], ['r-03', 'r-00']], 'the status filter and the caller\'s together')
    t.same(await allPages(t, as('alice', 0), 4, 'failed'), [['r-09']])
    t.same(await allPages(t, as('bob', 1), 4, 'failed'), [[]], 'bob has none failed')
    // a cursor carries no caller: bob's cursor, sent by alice, is a place in alice's list
    const bobsFirst = pageOf(await listOf(as('bob', 0), '?limit=5'))
    t.same(bobsFirst.ids, bob.slice(0, 5))
    const fromThere = pageOf(await listOf(as('alice', 0), `?limit=2&cursor=${bobsFirst.next as string}`))
    t.same(fromThere.ids, ['r-12', 'r-09'], 'alice\'s runs after r-13')
    t.not(fromThere.next, null, 'and more follow')
  })

  t.test(`${backend}, caller: DELETE …/_runs?status=queued cancels the caller's own queued runs alone`, async t => {
    const { app, as } = await accessFleet(t, backend, { RUN_ACCESS: 'caller' })
    // both slots busy (two in memory; one on each replica): what is submitted next waits
    t.equal((await as('bob', 0).submit('/hold/1', 'h-1')).status, 202)
    t.equal((await as('bob', 1).submit('/hold/2', 'h-2')).status, 202)
    await app.waitForHeld(2)
    for (const id of ['qa-1', 'qa-2']) t.equal((await as('alice', 0).submit('/json/x', id)).status, 202)
    for (const id of ['qb-1', 'qb-2', 'qb-3']) t.equal((await as('bob', 1).submit('/json/x', id)).status, 202)
    const purge = await listOf(as('alice', 1), '?status=queued', 'DELETE')
    t.equal(purge.status, 200)
    t.equal(purge.text, '{"canceled":2}', 'alice\'s two alone')
    t.same(pageOf(await listOf(as('alice', 0), '?status=queued')).ids, [])
    t.same(pageOf(await listOf(as('alice', 0), '?status=canceled')).ids, ['qa-2', 'qa-1'])
    t.same(pageOf(await listOf(as('bob', 0), '?status=queued')).ids, ['qb-3', 'qb-2', 'qb-1'], 'bob\'s stay queued')
    t.equal((await listOf(as('alice', 0), '?status=queued', 'DELETE')).text, '{"canceled":0}', 'nothing of alice\'s is left')
    t.equal((await listOf(as('bob', 0), '?status=queued', 'DELETE')).text, '{"canceled":3}')
    for (const held of app.held) held.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    for (const id of ['h-1', 'h-2']) t.equal((await as('bob').finished(id)).record.status, 'succeeded')
    t.equal(app.requestsTo('/json/x').length, 0, 'no canceled run reached the app')
  })
}

t.test('redis: a run recorded without its sub (an older version) is nobody\'s under caller, everyone\'s under project', async t => {
  const { app, sidecars, redis, as } = await accessFleet(t, 'redis', { RUN_ACCESS: 'caller' })
  const probe = redis?.probe
  if (probe === undefined) throw new Error('no Redis')
  t.equal((await as('alice', 0).submit('/json/x', 'old-done')).status, 202)
  t.equal((await as('alice', 0).finished('old-done')).record.status, 'succeeded')
  t.equal((await as('bob', 0).submit('/hold/1', 'h-1')).status, 202)
  t.equal((await as('bob', 1).submit('/hold/2', 'h-2')).status, 202)
  await app.waitForHeld(2)
  t.equal((await as('alice', 0).submit('/json/x', 'old-queued')).status, 202)
  for (const id of ['old-done', 'old-queued']) t.equal(await probe.hdel(`as:{p/a}:run:${id}`, 'sub'), 1, `${id}'s sub removed`)
  for (const who of ['alice', 'bob'] as const) {
    for (const id of ['old-done', 'old-queued']) await assertHidden(t, as(who, 1), id)
    t.same(pageOf(await listOf(as(who, 0), '?status=succeeded,queued')).ids, [], `${who} lists neither`)
    t.equal((await listOf(as(who, 1), '?status=queued', 'DELETE')).text, '{"canceled":0}', `${who}'s purge leaves it queued`)
  }
  // a sidecar of the same app with RUN_ACCESS=project (the default) sees them
  const first = sidecars[0]
  if (first === undefined) throw new Error('no sidecar')
  const open = await runsSidecarFor(t, app.url, { ...redis?.env, REPLICA_CONCURRENCY: '1', AUTH_JWKS_URL: first.jwks.url.href })
  const bob = runsClient({ base: open.base, project: 'p', app: 'a', token: await first.issuer.sign('p', { claims: { sub: 'bob' } }) })
  t.equal((await bob.read('old-done')).record.status, 'succeeded')
  t.same(pageOf(await listOf(bob)).ids, ['old-queued', 'h-2', 'h-1', 'old-done'], 'every run listed')
  t.ok(['queued', 'running', 'succeeded'].includes((await bob.read('old-queued')).record.status), 'still there, not canceled')
  for (const held of app.held) held.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
})
