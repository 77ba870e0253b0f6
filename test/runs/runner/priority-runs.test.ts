import t from 'tap'
import type { OutgoingHttpHeaders } from 'node:http'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { type RunsApp, type RunsClient, runsClient, startRunsApp } from '../../helpers/runs-client.ts'
import { privateRunStore } from '../../helpers/redis-server.ts'
import { eventually, type Harness, startHarness } from '../../helpers/sidecar-harness.ts'

// Priority and fair share through a real sidecar (REPLICA_CONCURRENCY=1, auth off): callers told
// apart by X-Forwarded-For; the app records the order requests reach it.

async function setUp (t: { teardown: (fn: () => unknown) => void }, env: Record<string, string> = {}): Promise<{ app: RunsApp, h: Harness, client: RunsClient }> {
  const app = await startRunsApp()
  t.teardown(() => app.close())
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', ...env })
  t.teardown(() => h.close())
  const client = runsClient({ base: h.base })
  await eventually(async () => (await client.call('/json/warm')).status === 200)
  return { app, h, client }
}

const from = (caller: string, priority?: string): OutgoingHttpHeaders =>
  priority === undefined ? { 'x-forwarded-for': `${caller}, 10.0.0.1` } : { 'x-forwarded-for': caller, priority }

/** A gauge's value on /metrics (`series` as written there, labels included). */
async function gauge (h: Harness, series: string): Promise<number | undefined> {
  const text = (await send(`${h.admin}/metrics`)).text
  const line = text.split('\n').find(l => l.startsWith(series + ' '))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

/** Paths of the app's requests, in arrival order, without the warm-up. */
const arrivals = (app: RunsApp): string[] => app.requests.map(r => r.url).filter(url => url !== '/json/warm')

t.test('waiting calls and queued runs start by urgency (sync first within one); Priority u=9 and malformed count as 3', async t => {
  const { app, h, client } = await setUp(t)
  const blocker = client.call('/hold/blocker', { headers: from('z') })
  const first = await app.waitForHeld(1)
  // while the only slot is held: runs queued, calls waiting
  t.equal((await client.submit('/hold/run-a5', 'run-a5', { headers: from('a', 'u=5') })).status, 202)
  t.equal((await client.submit('/hold/run-b1', 'run-b1', { headers: from('b', 'u=1, i') })).status, 202)
  t.equal((await client.submit('/hold/run-g3', 'run-g3', { headers: from('g', 'u=x') })).status, 202)
  const calls: Array<Promise<SentResponse>> = []
  const call = async (path: string, headers: OutgoingHttpHeaders, waiting: number): Promise<void> => {
    calls.push(client.call(path, { headers }))
    await eventually(async () => await gauge(h, 'sidecar_queued_requests') === waiting)
  }
  await call('/hold/sync-c5', from('c', 'u=5'), 1)
  await call('/hold/sync-d0', from('d', 'i, u=0'), 2)
  await call('/hold/sync-e1', from('e', 'u=1'), 3)
  await call('/hold/sync-f9', from('f', 'u=9'), 4)
  t.equal(await gauge(h, 'sidecar_async_queued_runs_by_urgency{urgency="1"}'), 1)
  t.equal(await gauge(h, 'sidecar_async_queued_runs_by_urgency{urgency="3"}'), 1)
  t.equal(await gauge(h, 'sidecar_async_queued_runs_by_urgency{urgency="5"}'), 1)

  first.res.end('done')
  for (let n = 2; n <= 8; n++) (await app.waitForHeld(n)).res.end('done')
  t.same(arrivals(app), ['/hold/blocker', '/hold/sync-d0', '/hold/sync-e1', '/hold/run-b1', '/hold/sync-f9', '/hold/run-g3', '/hold/sync-c5', '/hold/run-a5'])
  t.same((await Promise.all([blocker, ...calls])).map(r => r.status), [200, 200, 200, 200, 200])
  for (const run of ['run-a5', 'run-b1', 'run-g3']) t.equal((await client.finished(run)).record.status, 'succeeded')
  t.equal(await gauge(h, 'sidecar_async_queued_runs_by_urgency{urgency="1"}'), 0)
})

t.test('fair share: caller B\'s one run starts right after the first of caller A\'s backlog of 20', async t => {
  const { app, client } = await setUp(t)
  const blocker = client.call('/hold/blocker', { headers: from('z') })
  const first = await app.waitForHeld(1)
  for (let i = 1; i <= 20; i++) t.equal((await client.submit(`/json/a${i}`, `run-a${i}`, { headers: from('a') })).status, 202)
  t.equal((await client.submit('/json/b1', 'run-b1', { headers: from('b') })).status, 202)
  first.res.end('done')
  t.equal((await blocker).status, 200)
  for (let i = 1; i <= 20; i++) await client.finished(`run-a${i}`)
  await client.finished('run-b1')
  const order = arrivals(app).slice(1)
  t.same(order.slice(0, 3), ['/json/a1', '/json/b1', '/json/a2'], 'B\'s run second')
  t.same(order.filter(url => url.startsWith('/json/a')), Array.from({ length: 20 }, (_, i) => `/json/a${i + 1}`), 'A\'s own in submission order')
})

t.test('CALLER_MAX_INFLIGHT=1: a caller\'s second call and its run wait (not refused) while another caller\'s go ahead', async t => {
  const { app, h, client } = await setUp(t, { REPLICA_CONCURRENCY: '2', CALLER_MAX_INFLIGHT: '1' })
  const a1 = client.call('/hold/a1', { headers: from('a') })
  const heldA1 = await app.waitForHeld(1)
  const a2 = client.call('/hold/a2', { headers: from('a') })
  await eventually(async () => await gauge(h, 'sidecar_queued_requests') === 1) // waits though a slot is free
  t.equal(await gauge(h, 'sidecar_busiest_caller_inflight'), 1)
  const b1 = client.call('/hold/b1', { headers: from('b') })
  const heldB1 = await app.waitForHeld(2)
  t.equal(heldB1.url, '/hold/b1', 'B goes ahead of A\'s waiting call')
  t.same(arrivals(app), ['/hold/a1', '/hold/b1'])
  heldA1.res.end('a1 done')
  const heldA2 = await app.waitForHeld(3)
  t.equal(heldA2.url, '/hold/a2', 'A\'s second call goes once its first ended')
  heldB1.res.end('b1 done')
  t.same((await Promise.all([a1, b1])).map(r => r.status), [200, 200])

  // the same for runs: A's run waits while A's call holds its one slot; B's run goes
  t.equal((await client.submit('/json/a-run', 'run-a', { headers: from('a') })).status, 202)
  t.equal((await client.submit('/json/b-run', 'run-b', { headers: from('b') })).status, 202)
  t.equal((await client.finished('run-b')).record.status, 'succeeded')
  t.equal((await client.read('run-a')).record.status, 'queued', 'A\'s run still waits, a slot free')
  heldA2.res.end('a2 done')
  t.equal((await a2).status, 200)
  t.equal((await client.finished('run-a')).record.status, 'succeeded')
  t.same(arrivals(app), ['/hold/a1', '/hold/b1', '/hold/a2', '/json/b-run', '/json/a-run'])
})

t.test('redis: CALLER_MAX_INFLIGHT counts a caller\'s async runs too (taken with their urgency and caller)', async t => {
  const store = await privateRunStore(t)
  const { app, client } = await setUp(t, { REPLICA_CONCURRENCY: '2', CALLER_MAX_INFLIGHT: '1', ...store.env })
  const a1 = client.call('/hold/a1', { headers: from('a') })
  const heldA1 = await app.waitForHeld(1)
  t.equal((await client.submit('/json/a-run', 'run-a', { headers: from('a', 'u=0') })).status, 202)
  t.equal((await client.submit('/json/b-run', 'run-b', { headers: from('b', 'u=6') })).status, 202)
  t.equal((await client.finished('run-b')).record.status, 'succeeded', 'B\'s run goes, though submitted after A\'s')
  t.equal((await client.read('run-a')).record.status, 'queued', 'A\'s run waits while A\'s call holds its one slot')
  t.same(await store.probe.hmget('as:{p/a}:run:run-a', 'urgency', 'caller'), ['0', 'a'])
  heldA1.res.end('a1 done')
  t.equal((await a1).status, 200)
  t.equal((await client.finished('run-a')).record.status, 'succeeded')
  t.same(arrivals(app), ['/hold/a1', '/json/b-run', '/json/a-run'])
})

t.test('redis, two replicas: queued runs are taken by urgency, then fairly across callers, whichever replica takes', async t => {
  const store = await privateRunStore(t)
  const app = await startRunsApp()
  t.teardown(() => app.close())
  const replicas: Harness[] = []
  for (let i = 0; i < 2; i++) {
    const h = await startHarness(app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', ...store.env })
    t.teardown(() => h.close())
    replicas.push(h)
  }
  const [one, two] = replicas.map(h => runsClient({ base: h.base })) as [RunsClient, RunsClient]
  // both slots held by sync calls while the runs queue
  const blockers = [one.call('/hold/blocker-1', { headers: from('z') }), two.call('/hold/blocker-2', { headers: from('z') })]
  const held = [await app.waitForHeld(1), await app.waitForHeld(2)]
  for (let i = 1; i <= 20; i++) t.equal((await one.submit(`/json/a${i}`, `run-a${i}`, { headers: from('a', 'u=3') })).status, 202)
  // no replica takes a run ahead for its busy slot: all 20 wait for their turn
  await eventually(async () => await gauge(replicas[1] as Harness, 'sidecar_async_queued_runs_by_urgency{urgency="3"}') === 20)
  t.equal((await two.submit('/json/b1', 'run-b1', { headers: from('b', 'u=3') })).status, 202)
  t.equal((await two.submit('/json/c1', 'run-c1', { headers: from('c', 'u=0') })).status, 202)
  t.equal(await gauge(replicas[0] as Harness, 'sidecar_async_queued_runs_by_urgency{urgency="3"}'), 21, 'by urgency, from the shared store')
  t.equal(await gauge(replicas[0] as Harness, 'sidecar_async_queued_runs_by_urgency{urgency="0"}'), 1)
  for (const h of held) h.res.end('done')
  t.same((await Promise.all(blockers)).map(r => r.status), [200, 200])
  for (let i = 1; i <= 20; i++) await one.finished(`run-a${i}`)
  t.equal((await two.finished('run-b1')).record.status, 'succeeded')
  t.equal((await one.finished('run-c1')).record.status, 'succeeded')
  const order = arrivals(app).filter(url => url.startsWith('/json/'))
  // taken as the slots free: c1, a1, b1, a2, …; two replicas start them two at a time, so neighbours may arrive swapped
  t.ok(order.indexOf('/json/c1') <= 1, `the urgent run first (${order.slice(0, 5).join(' ')})`)
  t.ok(order.indexOf('/json/b1') <= 3, `B's one run within one of A's backlog (${order.slice(0, 5).join(' ')})`)
  t.equal(order.length, 22, 'each run once')
})

t.test('redis, two replicas, CALLER_MAX_INFLIGHT=1: a capped caller\'s backlog stays shared, and both replicas run it', async t => {
  const store = await privateRunStore(t)
  const app = await startRunsApp()
  t.teardown(() => app.close())
  const env = { DISABLE_AUTH: 'true', CALLER_MAX_INFLIGHT: '1', ...store.env }
  const first = await startHarness(app.url, env)
  t.teardown(() => first.close())
  const one = runsClient({ base: first.base })
  for (let i = 1; i <= 20; i++) t.equal((await one.submit(`/hold/a${i}`, `run-a${i}`, { headers: from('a') })).status, 202)
  await app.waitForHeld(1)
  // the first replica runs one of A's runs and keeps none of the other 19: they stay queued
  await eventually(async () => await gauge(first, 'sidecar_async_queued_runs') === 19)
  t.equal(await store.probe.xpending('as:{p/a}:queue', 'runners').then(reply => reply[0]), 1, 'one entry held: the run at the app')
  const second = await startHarness(app.url, env)
  t.teardown(() => second.close())
  t.equal((await app.waitForHeld(2)).url, '/hold/a2', 'the second replica takes the next, at once')
  t.equal(app.held.filter(held => !held.res.writableEnded).length, 2, 'two of A\'s runs at the app: one per replica')
  for (let n = 1; n <= 20; n++) (await app.waitForHeld(n)).res.end('done')
  for (let i = 1; i <= 20; i++) t.equal((await one.finished(`run-a${i}`)).record.status, 'succeeded')
  const [ranFirst, ranSecond] = await Promise.all([first, second].map(async h => await gauge(h, 'sidecar_runs_total{status="succeeded"}') ?? 0)) as [number, number]
  t.equal(ranFirst + ranSecond, 20)
  t.ok(ranFirst >= 5 && ranSecond >= 5, `both replicas ran A's runs (${ranFirst} + ${ranSecond})`)
})
