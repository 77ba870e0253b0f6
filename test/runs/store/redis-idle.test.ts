import type { Redis } from 'ioredis'
import t from 'tap'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import { privateRunStore } from '../../helpers/redis-server.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// What an idle sidecar costs Redis (docs/runs.md, "Where runs live"): one look at the due set per
// lost window, a takeover of what no lease covers every tenth, a blocking wait every 300 s; no
// heartbeat while it holds nothing, no probe while the store answers. At RUN_LOST_AFTER_SECONDS=30
// that is under 0.1 commands a second; here the window is 1 s, so a window's worth is asserted.

const SCOPE = { projectId: 'p', appName: 'a' }
const SETTINGS: RedisStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 100, queueMaxBytes: 1024 * 1024, scope: SCOPE }
const LOST_AFTER_MS = 1000

/** Every command Redis ran (INFO commandstats, those inside scripts included), less the INFO calls themselves. */
async function commands (probe: Redis): Promise<number> {
  let calls = 0
  for (const [, name, count] of (await probe.info('commandstats')).matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) if (name !== 'info') calls += Number(count)
  return calls
}

t.test('two idle sidecars, after runs: at most 3 commands each per lost window (0.1/s at the default 30 s)', async t => {
  const redis = await privateRunStore(t)
  const stores = [0, 1].map(i => new RedisRunStore(redis.url, SETTINGS, { heartbeatMs: 200, lostAfterMs: LOST_AFTER_MS, consumer: `idle-${i}` }))
  const taking = new AbortController()
  t.teardown(async () => {
    taking.abort(new Error('done'))
    for (const store of stores) await store.close()
  })
  await Promise.all(stores.map(async store => await store.reachable(5000)))
  // work first: runs taken, started and ended on both, so each has held something and let go
  for (let i = 0; i < 6; i++) {
    const store = stores[i % 2] as RedisRunStore
    await store.queue.submit({ scope: SCOPE, runId: `r${i}`, request: { method: 'POST', path: '/x', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
    const run = await store.queue.take(AbortSignal.timeout(5000))
    const started = await store.queue.start(run, Date.now())
    if (started === undefined) throw new Error('not started')
    await store.records.finish(started, { status: 'succeeded', statusCode: 200, resultJson: '{}', runTimeMs: 1, error: undefined, completedAt: Date.now() })
  }
  // then idle, each with a take waiting, as a runner's does
  for (const store of stores) store.queue.take(taking.signal).catch(() => {})
  // their leases leave the due set once the ends they keep for a failover have aged out
  await eventually(async () => await redis.probe.zcard('as:{p/a}:expiry') === 0, 5 * LOST_AFTER_MS)
  const before = await commands(redis.probe)
  const windows = 10
  await new Promise(resolve => setTimeout(resolve, windows * LOST_AFTER_MS))
  const sent = await commands(redis.probe) - before
  t.ok(sent <= 3 * windows * stores.length, `${sent} commands from ${stores.length} sidecars over ${windows} lost windows (at most ${3 * windows * stores.length})`)
  t.ok(sent >= windows, 'and they do look (one ZRANGE each per window)')
})
