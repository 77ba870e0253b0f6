import { Redis } from 'ioredis'
import t from 'tap'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { NewRun, TakenRun } from '../../../src/runs/run-data.ts'
import { flushRedis, testRedis } from '../../helpers/redis-server.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// The Redis queue's turn order (redis-queue-scripts.ts): by urgency, then fair across callers,
// each caller's own in order, whichever of two sidecars takes; what cancels, releases, stale
// turns and a drained queue leave behind.

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

const SCOPE = { projectId: 'proj', appName: 'app' }
const SETTINGS: RedisStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 5000, queueMaxBytes: 256 * 1024 * 1024, scope: SCOPE }
const KEYS = { turns: 'as:{proj/app}:turns', fair: 'as:{proj/app}:fair', wake: 'as:{proj/app}:wake' }

const run = (runId: string, caller?: string, urgency?: number): NewRun => ({
  scope: SCOPE,
  runId,
  request: { method: 'POST', path: '/x', headers: [], body: null },
  webhook: undefined,
  createdAt: Date.now(),
  ...(urgency === undefined ? {} : { urgency, caller: caller ?? '' })
})

t.test('redis turn order', async t => {
  const redisUrl = await testRedis(t)
  if (redisUrl === undefined) return

  /** Two sidecars' stores on an empty Redis, and a connection to look at what they wrote. */
  const twoStores = async (t: Tap): Promise<{ a: RedisRunStore, b: RedisRunStore, probe: Redis }> => {
    await flushRedis(redisUrl)
    const a = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'a' })
    const b = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'b' })
    const probe = new Redis(redisUrl)
    t.teardown(async () => { await a.close(); await b.close(); probe.disconnect() })
    await Promise.all([a.reachable(5000), b.reachable(5000)])
    return { a, b, probe }
  }
  const takeAll = async (stores: RedisRunStore[], count: number): Promise<TakenRun[]> => {
    const taken: TakenRun[] = []
    for (let i = 0; i < count; i++) taken.push(await (stores[i % stores.length] as RedisRunStore).queue.take(AbortSignal.timeout(5000)))
    return taken
  }

  t.test('by urgency, then round robin across callers, each caller\'s own in order; no Priority: urgency 3, caller \'\'', async t => {
    const { a, b, probe } = await twoStores(t)
    for (let i = 1; i <= 5; i++) await a.queue.submit(run(`a${i}`, 'alice', 3))
    await b.queue.submit(run('b1', 'bob', 3))
    await a.queue.submit(run('c1', 'carol', 1))
    await b.queue.submit(run('d1'))
    await a.queue.submit(run('e1', 'erin', 7))
    t.same(await a.queue.queuedByUrgency(), [0, 1, 0, 7, 0, 0, 0, 1], 'sidecar_async_queued_runs_by_urgency, from either sidecar')
    t.same(await b.queue.queuedByUrgency(), [0, 1, 0, 7, 0, 0, 0, 1])
    const taken = await takeAll([a, b], 9)
    t.same(taken.map(r => r.runId), ['c1', 'a1', 'b1', 'd1', 'a2', 'a3', 'a4', 'a5', 'e1'])
    t.same(taken.slice(0, 2).map(r => [r.urgency, r.caller]), [[1, 'carol'], [3, 'alice']], 'each taken with its urgency and caller')
    t.equal(taken[3]?.urgency, undefined, 'a run without Priority: no urgency handed out (the gate counts it last)')
    const pending = await probe.xpending('as:{proj/app}:queue', 'runners') as [number, ...unknown[]]
    t.equal(pending[0], 9, 'every run taken is in its taker\'s pending list (leases, the reaper, fencing)')
    t.equal(await probe.exists(KEYS.turns, KEYS.wake), 0, 'the last turn taken: no turn or wake-up left')
    t.same(await probe.zmscore(KEYS.fair, 'v1', 'v3', 'v7'), [String(2 ** 40 + 0), String(3 * 2 ** 40 + 4), String(7 * 2 ** 40 + 0)], 'the order\'s state stays while runs are taken one after another: each urgency\'s virtual time')
    await t.rejects(b.queue.take(AbortSignal.timeout(50)))
    t.equal(await probe.exists(KEYS.turns, KEYS.fair, KEYS.wake), 0, 'a take found none queued: no turn state left')
  })

  t.test('caller B\'s one run behind caller A\'s 1,000 is taken second; a caller arriving later is not put behind the backlog either', async t => {
    const { a, b } = await twoStores(t)
    await Promise.all(Array.from({ length: 1000 }, async (_, i) => { await a.queue.submit(run(`a${String(i + 1).padStart(4, '0')}`, 'alice', 4)) }))
    await b.queue.submit(run('b1', 'bob', 4))
    const first = await takeAll([a, b], 3)
    t.equal(first[0]?.caller, 'alice')
    t.equal(first[1]?.runId, 'b1', 'B second')
    t.equal(first[2]?.caller, 'alice')
    await b.queue.submit(run('c1', 'carol', 4))
    await b.queue.submit(run('c2', 'carol', 4))
    const next = await takeAll([b, a], 4)
    t.same(next.map(r => r.caller), ['carol', 'alice', 'carol', 'alice'], 'a later caller alternates with the backlog')
    const alice = [...first, ...next].filter(r => r.caller === 'alice').map(r => r.runId)
    t.same(alice, [...alice].sort(), 'A\'s own in submission order')
  })

  t.test('a run given back keeps its turn; a canceled run leaves the order; a stale turn is passed over', async t => {
    const { a, b, probe } = await twoStores(t)
    for (const id of ['x1', 'x2', 'x3']) await a.queue.submit(run(id, 'xavier', 2))
    await a.queue.submit(run('y1', 'yann', 2))
    const x1 = await a.queue.take(AbortSignal.timeout(5000))
    t.equal(x1.runId, 'x1')
    await a.queue.release(x1)
    t.equal((await b.queue.take(AbortSignal.timeout(5000))).runId, 'x1', 'given back: first again, for the other sidecar')
    await a.records.cancel(SCOPE, 'y1')
    t.equal(await probe.zcard(KEYS.turns), 2, 'the canceled run left the order')
    t.equal(await probe.hexists('as:{proj/app}:run:y1', 'turn'), 0)
    await probe.del('as:{proj/app}:run:x2') // a run whose hash is gone (by hand): its turn is passed over
    t.equal((await a.queue.take(AbortSignal.timeout(5000))).runId, 'x3')
  })

  t.test('more stale turns than one take passes over: it asks again', async t => {
    const { a, probe } = await twoStores(t)
    for (let i = 1; i <= 40; i++) await a.queue.submit(run(`s${i}`, 'sam', 3))
    for (let i = 1; i <= 39; i++) await probe.del(`as:{proj/app}:run:s${i}`)
    t.equal((await a.queue.take(AbortSignal.timeout(5000))).runId, 's40')
  })

  t.test('the wake list holds no more wake-ups than runs queued; a take waiting is woken by a run submitted on the other sidecar', async t => {
    const { a, b, probe } = await twoStores(t)
    const waiting = a.queue.take(AbortSignal.timeout(5000))
    await eventually(async () => String(await probe.client('LIST')).includes('cmd=blpop'), 5000) // blocked on the wake list
    await b.queue.submit(run('w1', 'will', 3))
    t.equal((await waiting).runId, 'w1')
    for (let i = 2; i <= 6; i++) await b.queue.submit(run(`w${i}`, 'will', 3))
    t.equal(await probe.llen(KEYS.wake), 5)
    // a (its last take left no turn) waits for a wake-up first, using one up; b asks at once
    for (const store of [a, b, a]) {
      await store.queue.take(AbortSignal.timeout(5000))
      t.equal(await probe.llen(KEYS.wake), await probe.zcard(KEYS.turns), 'as many wake-ups as turns left')
    }
    t.equal(await probe.zcard(KEYS.turns), 2)
  })

  t.test('a rolling upgrade: runs queued by the version before (no turn) get one once the turn order empties, in the order they came, with their urgency and caller', async t => {
    const { a, b, probe } = await twoStores(t)
    await a.queue.take(AbortSignal.timeout(50)).catch(() => {}) // the group exists, as an older sidecar's read left it
    const old = async (runId: string, urgency: string, caller: string): Promise<void> => {
      const record = `{"run_id":"${runId}","status":"queued","created_at":"${new Date().toISOString()}"}`
      // as that version's SUBMIT wrote them: the entry carries the record, urgency and caller
      const id = await probe.xadd('as:{proj/app}:queue', '*', 'run', runId, 'record', record, 'urgency', urgency, 'caller', caller) as string
      await probe.hset(`as:{proj/app}:run:${runId}`, 'record', record, 'request', '{"method":"POST","path":"/x","headers":[],"hasBody":false}', 'async', '1', 'entry', id, 'queued_bytes', 0, 'urgency', urgency, 'caller', caller)
    }
    await old('old-1', '5', 'olga')
    await a.queue.submit(run('new-1', 'nina', 6))
    await old('old-2', '5', 'olga')
    // b (a sidecar of this version just started) looks at once; a, having found none just now, within 10 s
    const taken = [await b.queue.take(AbortSignal.timeout(5000)), await b.queue.take(AbortSignal.timeout(5000)), await b.queue.take(AbortSignal.timeout(5000))]
    t.same(taken.map(r => [r.runId, r.urgency, r.caller]), [['new-1', 6, 'nina'], ['old-1', 5, 'olga'], ['old-2', 5, 'olga']])
    t.ok((await b.queue.start(taken[1] as TakenRun, Date.now()))?.request !== undefined, 'an old run starts with its request')
  })
})
