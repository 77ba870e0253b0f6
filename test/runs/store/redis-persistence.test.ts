// The persistence check at start (docs/runs.md, "Running Redis for the fleet"):
// a private redis-server per case, configured as each case needs.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { RedisRunStore } from '../../../src/runs/store/redis/redis-run-store.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'
import { startSidecarProcess } from '../../helpers/sidecar-process.ts'
import { startTestServer } from '../../helpers/sidecar-harness.ts'

const SETTINGS = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 100, queueMaxBytes: 1024 * 1024, scope: { projectId: 'p', appName: 'a' } }
const NO_AOF = 'run store: appendonly is no: a Redis restart loses the runs, key claims and webhook deliveries written since its last snapshot (set appendonly yes)'
const evicts = (policy: string): string =>
  `run store: maxmemory-policy is ${policy}: a full Redis evicts keys, losing runs, key claims and webhook deliveries (set maxmemory-policy noeviction)`

/** redis-server options for an AOF in a folder of the test's own. */
function aof (t: Test): string[] {
  const dir = mkdtempSync(join(tmpdir(), 'aof-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  return ['--appendonly', 'yes', '--dir', dir]
}

interface Warned { fields: Record<string, unknown>, message: string }

/** The warn lines of one check of a store on `url`, once it is done. */
async function warnings (t: Test, url: string): Promise<Warned[]> {
  const store = new RedisRunStore(url, SETTINGS)
  t.teardown(async () => { await store.close() })
  const warned: Warned[] = []
  await store.checkPersistence((fields, message) => { warned.push({ fields, message }) })
  return warned
}

t.test('appendonly no: one warn line naming it and what a restart loses', async t => {
  const redis = await startPrivateRedis(t) // --appendonly no, noeviction
  t.same(await warnings(t, redis.url), [{ fields: { runStore: 'redis', setting: 'appendonly', value: 'no' }, message: NO_AOF }])
})

t.test('an evicting policy: one warn line naming it', async t => {
  const redis = await startPrivateRedis(t, [...aof(t), '--maxmemory-policy', 'allkeys-lru'])
  t.same(await warnings(t, redis.url), [{ fields: { runStore: 'redis', setting: 'maxmemory-policy', value: 'allkeys-lru' }, message: evicts('allkeys-lru') }])
})

t.test('both: two lines; volatile-lru evicts too', async t => {
  const redis = await startPrivateRedis(t, ['--maxmemory-policy', 'volatile-lru'])
  t.same((await warnings(t, redis.url)).map(w => w.message), [NO_AOF, evicts('volatile-lru')])
})

t.test('appendonly yes and noeviction: nothing logged', async t => {
  const redis = await startPrivateRedis(t, [...aof(t), '--maxmemory-policy', 'noeviction'])
  t.same(await warnings(t, redis.url), [])
})

t.test('a Redis that refuses CONFIG GET (renamed away, as managed services do): nothing logged', async t => {
  const redis = await startPrivateRedis(t, ['--rename-command', 'CONFIG', ''])
  t.same(await warnings(t, redis.url), [])
})

t.test('a Redis down at start is checked once it first answers', async t => {
  const redis = await startPrivateRedis(t)
  await redis.stop()
  const checked = warnings(t, redis.url)
  await redis.start()
  t.same((await checked).map(w => w.message), [NO_AOF])
})

t.test('the sidecar logs it at start, once, as a warn line', async t => {
  const redis = await startPrivateRedis(t, ['--maxmemory-policy', 'allkeys-random'])
  const app = await startTestServer((_req, res) => { res.end('ok') })
  t.teardown(() => app.close())
  const sidecar = await startSidecarProcess(t, { DISABLE_AUTH: 'true', APP_URL: app.url, RUN_STORE_URL: redis.url, PROJECT_ID: 'p', APP_NAME: 'a' })
  await sidecar.child.waitForLine(line => line.setting === 'maxmemory-policy')
  const warned = sidecar.child.lines.filter(line => typeof line.setting === 'string')
    .map(({ level, msg, runStore, setting, value }) => ({ level, msg, runStore, setting, value }))
  t.same(warned, [
    { level: 40, msg: NO_AOF, runStore: 'redis', setting: 'appendonly', value: 'no' },
    { level: 40, msg: evicts('allkeys-random'), runStore: 'redis', setting: 'maxmemory-policy', value: 'allkeys-random' }
  ])
})
