import t from 'tap'
import { fetchMetrics, sampleValue } from '../helpers/admin-metrics.ts'
import { runsClient, startRunsApp } from '../helpers/runs-client.ts'
import { eventually, startHarness } from '../helpers/sidecar-harness.ts'

// With auth on, the caller fairness and CALLER_MAX_INFLIGHT count by is the token's `sub`, not
// the address: two subjects behind one proxy address are two callers.

t.test('auth on: callers are told apart by their token\'s sub', async t => {
  const app = await startRunsApp()
  t.teardown(() => app.close())
  const h = await startHarness(app.url, { REPLICA_CONCURRENCY: '2', CALLER_MAX_INFLIGHT: '1' })
  t.teardown(() => h.close())
  const alice = runsClient({ base: h.base, project: 'proj', token: await h.issuer.sign('proj', { claims: { sub: 'alice' } }) })
  const bob = runsClient({ base: h.base, project: 'proj', token: await h.issuer.sign('proj', { claims: { sub: 'bob' } }) })
  const proxy = { 'x-forwarded-for': '10.1.1.1' }
  await eventually(async () => (await alice.call('/json/warm', { headers: proxy })).status === 200)

  const a1 = alice.call('/hold/a1', { headers: proxy })
  const heldA1 = await app.waitForHeld(1)
  const a2 = alice.call('/hold/a2', { headers: proxy })
  await eventually(async () => sampleValue(await fetchMetrics(h.admin), 'sidecar_queued_requests') === 1)
  const b1 = bob.call('/hold/b1', { headers: proxy })
  const heldB1 = await app.waitForHeld(2)
  t.equal(heldB1.url, '/hold/b1', 'bob goes ahead of alice\'s second call, from the same address')
  heldA1.res.end('a1')
  const heldA2 = await app.waitForHeld(3)
  t.equal(heldA2.url, '/hold/a2')
  heldA2.res.end('a2')
  heldB1.res.end('b1')
  t.same((await Promise.all([a1, a2, b1])).map(r => r.status), [200, 200, 200])
})
