import { Redis } from 'ioredis'
import t from 'tap'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { NewRun, RunOutcome } from '../../../src/runs/run-data.ts'
import { flushRedis, testRedis } from '../../helpers/redis-server.ts'

// END_AND_TAKE (redis-scripts.ts, RedisQueue.endAndTake): a run's end takes the next run for the
// slot it leaves in the same script, while the last take saw a backlog; the end alone otherwise.

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

const SCOPE = { projectId: 'proj', appName: 'app' }
const SETTINGS: RedisStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 100, queueMaxBytes: 1024 * 1024, scope: SCOPE }
const run = (runId: string): NewRun => ({
  scope: SCOPE, runId, request: { method: 'POST', path: `/${runId}`, headers: ['x-a', '1'], body: Buffer.from(runId) }, webhook: undefined, createdAt: Date.now()
})
const OUTCOME: RunOutcome = { status: 'succeeded', statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 3, error: undefined, completedAt: Date.now() }

/** The scripts `act` sends, by their number of keys (MONITOR: 15 END_AND_TAKE, 8 TRANSITION, 7 TAKE), other sidecar work left out. */
async function scriptsSent (redisUrl: string, act: () => Promise<unknown>): Promise<number[]> {
  const client = new Redis(redisUrl)
  const monitor = await client.monitor()
  const seen: number[] = []
  monitor.on('monitor', (_time: string, args: string[]) => {
    if (args[0]?.toLowerCase() === 'evalsha' && ['15', '8', '7'].includes(args[2] ?? '') && String(args[3]).startsWith('as:{proj/app}:')) seen.push(Number(args[2]))
  })
  try {
    await act()
    // a command sent after the act's, on the probe: MONITOR shows it after everything before it
    const marker = new Redis(redisUrl)
    await new Promise<void>(resolve => {
      monitor.on('monitor', (_time: string, args: string[]) => { if (args[0] === 'echo') resolve() })
      void marker.echo('marker').finally(() => { marker.disconnect() })
    })
  } finally {
    monitor.disconnect()
    client.disconnect()
  }
  return seen
}

t.test('end and take', async t => {
  const redisUrl = await testRedis(t)
  if (redisUrl === undefined) return
  const fresh = async (t: Tap): Promise<{ store: RedisRunStore, probe: Redis }> => {
    await flushRedis(redisUrl)
    const store = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'taker' })
    const probe = new Redis(redisUrl)
    t.teardown(async () => { await store.close(); probe.disconnect() })
    await store.reachable(5000)
    return { store, probe }
  }

  t.test('with a backlog, each end takes the next run along in one script; once the queue is drained, the end goes alone', async t => {
    const { store, probe } = await fresh(t)
    for (const id of ['r1', 'r2', 'r3']) await store.queue.submit(run(id))
    const first = await store.queue.take(AbortSignal.timeout(5000))
    t.equal(first.runId, 'r1')

    let one: Awaited<ReturnType<typeof store.queue.endAndTake>> | undefined
    t.same(await scriptsSent(redisUrl, async () => { one = await store.queue.endAndTake(first, OUTCOME) }), [15], 'the end and the take: one script')
    if (one === undefined) throw new Error('no end')
    t.equal(one.view.record.status, 'succeeded')
    t.equal((await store.records.get(SCOPE, 'r1')).record.status, 'succeeded')
    t.equal(one.next?.runId, 'r2', 'the next run, taken')
    t.same(one.next?.request, run('r2').request, 'with its request: it is started')
    t.equal((await store.records.get(SCOPE, 'r2')).record.status, 'running')
    t.equal(await probe.hget('as:{proj/app}:run:r2', 'owner'), 'taker')

    const two = await store.queue.endAndTake(one.next as NonNullable<typeof one.next>, OUTCOME)
    t.equal(two.next?.runId, 'r3', 'the last one queued')
    t.equal(await store.queue.queuedCount(), 0)

    let three: Awaited<ReturnType<typeof store.queue.endAndTake>> | undefined
    t.same(await scriptsSent(redisUrl, async () => { three = await store.queue.endAndTake(two.next as NonNullable<typeof two.next>, OUTCOME) }), [8], 'the end alone')
    t.equal(three?.next, undefined, 'the take before left no turn: nothing taken')
    t.same(await Promise.all(['r1', 'r2', 'r3'].map(async id => (await store.records.get(SCOPE, id)).record.status)), ['succeeded', 'succeeded', 'succeeded'])
    t.equal(await store.queue.runningCount(), 0)
  })

  t.test('a run canceled before its end: the cancel stands and nothing is taken; the runs queued stay queued', async t => {
    const { store } = await fresh(t)
    for (const id of ['c1', 'c2', 'c3']) await store.queue.submit(run(id))
    const first = await store.queue.take(AbortSignal.timeout(5000))
    await store.records.cancel(SCOPE, 'c1')
    const ended = await store.queue.endAndTake(first, OUTCOME)
    t.equal(ended.view.record.status, 'canceled')
    t.equal(ended.next, undefined)
    t.equal(await store.queue.queuedCount(), 2)
    t.equal((await store.queue.take(AbortSignal.timeout(5000))).runId, 'c2', 'the next take gets the next in turn')
  })

  t.test('a queued run canceled meanwhile is passed over by the take along', async t => {
    const { store } = await fresh(t)
    for (const id of ['p1', 'p2', 'p3']) await store.queue.submit(run(id))
    const first = await store.queue.take(AbortSignal.timeout(5000))
    await store.records.cancel(SCOPE, 'p2')
    const { next } = await store.queue.endAndTake(first, OUTCOME)
    t.equal(next?.runId, 'p3')
    t.equal((await store.records.get(SCOPE, 'p2')).record.status, 'canceled')
  })
})
