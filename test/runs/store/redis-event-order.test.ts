import { Redis } from 'ioredis'
import t from 'tap'
import { RunStoreUnavailableError } from '../../../src/errors.ts'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { RunEventItem } from '../../../src/runs/run-data.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'

// A running run's events are never silently lost (docs/runs.md, "Where runs live"): a Redis
// that does not know the store's scripts (a fresh start, SCRIPT FLUSH, a failover) answers
// NOSCRIPT, and a stall holds every command meanwhile.

const SCOPE = { projectId: 'proj', appName: 'app' }
const SETTINGS: RedisStoreSettings = { retentionSeconds: 60, maxEvents: 100_000, maxEventBytes: 64 * 1024 * 1024, queueDepth: 10, queueMaxBytes: 1024 * 1024, scope: SCOPE }
const TOTAL = 20_000

const nextTurn = async (): Promise<void> => { await new Promise(resolve => setImmediate(resolve)) }

t.test('a fast stream on a fresh Redis, with SCRIPT FLUSH twice, a stall (CLIENT PAUSE) and dropped connections in the middle: every event kept, in order, none missing', async t => {
  const redis = await startPrivateRedis(t) // knows no script yet
  const admin = new Redis(redis.url)
  t.teardown(() => admin.disconnect())
  const store = new RedisRunStore(redis.url, SETTINGS)
  t.teardown(() => store.close())
  await store.reachable(5000)
  await store.queue.submit({ scope: SCOPE, runId: 'fast', request: { method: 'POST', path: '/', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
  const run = await store.queue.take(AbortSignal.timeout(5000))
  t.equal((await store.queue.start(run, Date.now()))?.runId, run.runId, 'started')
  await admin.script('FLUSH') // as after a failover to a replica that never ran them
  for (let n = 0; n < TOTAL; n++) {
    store.records.appendEvent(run, n, `event ${n}`)
    if (n % 250 === 249) await nextTurn() // the app's stream arrives in reads, each a turn of the event loop
    if (n === 5000 || n === 14_000) void admin.script('FLUSH')
    if (n === 9000) void admin.call('CLIENT', 'PAUSE', '300', 'ALL')
    if (n === 17_000) void admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes') // the store's connections drop mid-write
  }
  // as the runner does: the end is retried while the store cannot be reached
  const outcome = { status: 'succeeded' as const, statusCode: 200, resultJson: '[]', runTimeMs: 1, error: undefined, completedAt: Date.now() }
  for (let tries = 0; ; tries++) {
    const ended = await store.records.finish(run, outcome).then(() => true, (error: unknown) => {
      if (!(error instanceof RunStoreUnavailableError) || tries > 50) throw error
      return false
    })
    if (ended) break
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  const items: RunEventItem[] = []
  for await (const item of await store.records.follow(SCOPE, 'fast', -1, AbortSignal.timeout(30_000))) items.push(item)
  const numbers = items.flatMap(item => item.type === 'event' ? [item.n] : [])
  const missing = Array.from({ length: TOTAL }, (_, n) => n).filter(n => !numbers.includes(n))
  t.same(missing.slice(0, 20), [], `no event missing (${missing.length} missing)`)
  t.ok(numbers.every((n, i) => n === i), 'each once, in order')
  t.ok(items.every(item => item.type !== 'event' || item.data === `event ${item.n}`), 'each with its own data')
  t.equal(items.filter(item => item.type === 'gap').length, 0, 'no gap')
  t.equal(items.at(-1)?.type, 'done')
  t.equal(await admin.xlen('as:{proj/app}:events:fast'), TOTAL, 'all of them in the events stream')
})
