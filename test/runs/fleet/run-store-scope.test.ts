import type { ServerResponse } from 'node:http'
import { Redis } from 'ioredis'
import t, { type Test } from 'tap'
import { RedisRunStore } from '../../../src/runs/store/redis/redis-run-store.ts'
import { send } from '../../helpers/http-client.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'
import { eventually, startTestServer, type TestServer } from '../../helpers/sidecar-harness.ts'
import { startSidecarProcess, type SidecarProcess } from '../../helpers/sidecar-process.ts'
import { startWebhookReceiver } from '../../helpers/webhook-receiver.ts'

// Two apps on one private redis-server, two sidecar processes each: every sidecar keeps to its own
// app (runs, cancels, keys), holds two named connections, and leaves no consumer behind.

interface App extends TestServer { held: Map<string, ServerResponse> }

async function startApp (t: Test): Promise<App> {
  const held = new Map<string, ServerResponse>()
  const app = await startTestServer((req, res) => {
    if (req.url?.startsWith('/hold')) { held.set(req.headers['x-request-id'] as string, res); return }
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  })
  t.teardown(() => app.close())
  return Object.assign(app, { held })
}

// the two subtests share nothing (a Redis each): the second's wait for the lost window runs beside the first
t.jobs = 2

const ranIds = (app: App): string[] => app.requests.map(r => r.headers['x-request-id'] as string)
const consumers = async (admin: Redis, stream: string, group: string): Promise<string[]> =>
  ((await admin.xinfo('CONSUMERS', stream, group)) as string[][]).map(fields => fields[1] as string).sort()

t.test('two apps, two sidecars each, on one Redis', async t => {
  const redis = await startPrivateRedis(t)
  const admin = new Redis(redis.url, { connectionName: 'test-admin' })
  t.teardown(() => admin.disconnect())
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const common = { DISABLE_AUTH: 'true', PROJECT_ID: 'p', RUN_STORE_URL: redis.url, WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' }
  const apps = [await startApp(t), await startApp(t), await startApp(t), await startApp(t)] as const
  // app a's replicas are named by HOSTNAME, app b's by the random id each picks at start; all four start together
  const sidecars: readonly SidecarProcess[] = await Promise.all([
    startSidecarProcess(t, { ...common, APP_NAME: 'a', HOSTNAME: 'a-0', APP_URL: apps[0].url, REPLICA_CONCURRENCY: '1' }),
    startSidecarProcess(t, { ...common, APP_NAME: 'a', HOSTNAME: 'a-1', APP_URL: apps[1].url, REPLICA_CONCURRENCY: '1' }),
    startSidecarProcess(t, { ...common, APP_NAME: 'b', APP_URL: apps[2].url }),
    startSidecarProcess(t, { ...common, APP_NAME: 'b', APP_URL: apps[3].url })
  ])
  const [a0, a1, b0, b1] = sidecars as [SidecarProcess, SidecarProcess, SidecarProcess, SidecarProcess]
  const hook = encodeURIComponent(receiver.url)

  t.test('each sidecar holds two connections, named app-sidecar:<project>/<app>:<replica>', async t => {
    const list = (await admin.client('LIST') as string).trim().split('\n')
      .map(line => /(?:^| )name=(\S*)/.exec(line)?.[1] ?? '').filter(name => name !== 'test-admin')
    t.ok(list.length <= 8, `${list.length} connections`)
    const count = new Map<string, number>()
    for (const name of list) count.set(name, (count.get(name) ?? 0) + 1)
    t.equal(count.get('app-sidecar:p/a:a-0'), 2)
    t.equal(count.get('app-sidecar:p/a:a-1'), 2)
    const random = [...count.keys()].filter(name => name.startsWith('app-sidecar:p/b:'))
    t.equal(random.length, 2, 'two replicas of b, each its own id')
    for (const name of random) {
      t.match(name, /^app-sidecar:p\/b:[0-9a-f]{12}$/)
      t.equal(count.get(name), 2, name)
    }
    t.same([...count.keys()].sort(), ['app-sidecar:p/a:a-0', 'app-sidecar:p/a:a-1', ...random].sort(), 'no other connection')
  })

  t.test('each sidecar only runs its own app\'s runs', async t => {
    const ids = { a: ['a-1', 'a-2', 'a-3', 'a-4', 'a-5', 'a-6'], b: ['b-1', 'b-2', 'b-3', 'b-4', 'b-5', 'b-6'] }
    for (const [app, sidecar] of [['a', a0], ['b', b0]] as const) {
      for (const id of ids[app]) {
        const r = await send(`${sidecar.base}/v4/p/${app}/work?async=true&webhookEndpoint=${hook}`, { method: 'POST', headers: { 'x-request-id': id } })
        t.equal(r.status, 202, id)
      }
    }
    await receiver.waitForAttempts(12, 15_000)
    t.same([...ranIds(apps[0]), ...ranIds(apps[1])].sort(), ids.a, 'app a\'s replicas ran a\'s runs, each once')
    t.same([...ranIds(apps[2]), ...ranIds(apps[3])].sort(), ids.b, 'app b\'s replicas ran b\'s runs, each once')
  })

  t.test('a cancel on one app never reaches the other, even for the same run id', async t => {
    for (const [app, sidecar] of [['a', a1], ['b', b1]] as const) {
      t.equal((await send(`${sidecar.base}/v4/p/${app}/hold?async=true`, { method: 'POST', headers: { 'x-request-id': 'twin' } })).status, 202)
    }
    await eventually(() => (apps[0].held.has('twin') || apps[1].held.has('twin')) && (apps[2].held.has('twin') || apps[3].held.has('twin')))
    const heldA = (apps[0].held.get('twin') ?? apps[1].held.get('twin')) as ServerResponse
    const heldB = (apps[2].held.get('twin') ?? apps[3].held.get('twin')) as ServerResponse
    // each app's replicas listen on their app's channel alone
    const channels = (await admin.pubsub('CHANNELS', '*') as string[]).filter(name => name.endsWith(':cancel')).sort()
    t.same(channels, ['as:{p/a}:cancel', 'as:{p/b}:cancel'])
    t.same(await admin.pubsub('NUMSUB', ...channels), ['as:{p/a}:cancel', 2, 'as:{p/b}:cancel', 2])
    const closedA = new Promise(resolve => heldA.once('close', resolve))
    t.equal((await send(`${a0.base}/v4/p/a/_runs/twin/cancel`, { method: 'POST' })).status, 200)
    await closedA
    t.equal(heldB.destroyed, false, 'b\'s run of the same id is not touched')
    heldB.writeHead(200, { 'content-type': 'application/json' }).end('{"b":1}')
    await eventually(async () => ((await send(`${b0.base}/v4/p/b/_runs/twin`)).json() as { status: string }).status === 'succeeded')
    t.equal((await send(`${b0.base}/v4/p/a/_runs/twin`)).status, 404, 'the other app\'s route is not served')
  })

  t.test('every key has its app\'s hash tag; the keys without a TTL are the queue, deliveries, queued-bytes and the runs\' status indexes of each app (and the turn order\'s state until its queue idles)', async t => {
    const keys = (await admin.keys('*')).sort()
    t.ok(keys.length > 0)
    for (const key of keys) t.match(key, /^as:\{p\/[ab]\}:/, key)
    t.notOk(keys.includes('as:scopes'))
    const forever: string[] = []
    for (const key of keys) if (await admin.ttl(key) === -1) forever.push(key)
    // the fair tags and virtual time stay while runs are taken one after another; a sidecar idle 10 s removes them
    const turnState = forever.filter(key => /:(fair|clock)$/.test(key))
    // the runs' indexes: one per status a run of the app has had
    const indexes = forever.filter(key => /:runs:(queued|running|succeeded|failed|canceled)$/.test(key))
    t.ok(indexes.length > 0 && indexes.length <= 10, `at most the five status indexes of each app (${indexes.join(' ')})`)
    // the due set (`…:expiry`) stays while a sidecar's lease or a gone one's is in it
    t.same(forever.filter(key => !turnState.includes(key) && !indexes.includes(key) && !key.endsWith(':expiry')), ['as:{p/a}:deliveries', 'as:{p/a}:queue', 'as:{p/a}:queued-bytes', 'as:{p/b}:deliveries', 'as:{p/b}:queue', 'as:{p/b}:queued-bytes'])
    t.equal(await admin.exists('as:{p/a}:turns', 'as:{p/a}:wake', 'as:{p/b}:turns', 'as:{p/b}:wake'), 0, 'no turn or wake-up left with nothing queued')
  })

  t.test('a sidecar that stops cleanly leaves its app\'s consumer groups', async t => {
    // one held run on each replica (one slot each), then its webhook: both are consumers of both groups
    for (const id of ['last-0', 'last-1']) await send(`${a0.base}/v4/p/a/hold?async=true&webhookEndpoint=${hook}`, { method: 'POST', headers: { 'x-request-id': id } })
    await eventually(() => apps[0].held.size + apps[1].held.size === 3) // with the canceled twin's
    for (const held of [...apps[0].held.values(), ...apps[1].held.values()]) if (!held.destroyed) held.writeHead(200).end('{}')
    await receiver.waitForAttempts(14, 15_000)
    t.same(await consumers(admin, 'as:{p/a}:queue', 'runners'), ['a-0', 'a-1'])
    t.same(await consumers(admin, 'as:{p/a}:deliveries', 'senders'), ['a-0', 'a-1'])
    a1.child.process.kill('SIGTERM')
    t.equal(await a1.child.exited, 0)
    t.same(await consumers(admin, 'as:{p/a}:queue', 'runners'), ['a-0'])
    t.same(await consumers(admin, 'as:{p/a}:deliveries', 'senders'), ['a-0'])
    t.equal((await admin.client('LIST') as string).includes('name=app-sidecar:p/a:a-1 '), false, 'its connections are closed')
  })
})

t.test('consumers of a killed sidecar: its entries taken over after the lost window, then the consumer reaped', async t => {
  const redis = await startPrivateRedis(t)
  const admin = new Redis(redis.url)
  t.teardown(() => admin.disconnect())
  const scope = { projectId: 'p', appName: 'a' }
  const settings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1024 * 1024, queueDepth: 10, queueMaxBytes: 1024 * 1024, scope }
  const survivor = new RedisRunStore(redis.url, settings, { heartbeatMs: 200, lostAfterMs: 1000, consumer: 'survivor' })
  t.teardown(() => survivor.close())
  await survivor.reachable(5000)
  await survivor.queue.submit({ scope, runId: 'orphan', request: { method: 'POST', path: '/', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
  // the killed sidecar: it read the run, and held a delivery, then vanished without a word
  const killedAt = Date.now()
  await admin.xgroup('CREATE', 'as:{p/a}:queue', 'runners', '0', 'MKSTREAM').catch(() => {}) // as a sidecar's first read makes it
  await admin.xreadgroup('GROUP', 'runners', 'killed', 'COUNT', 1, 'STREAMS', 'as:{p/a}:queue', '>')
  await admin.xgroup('CREATE', 'as:{p/a}:deliveries', 'senders', '0', 'MKSTREAM')
  await admin.xgroup('CREATECONSUMER', 'as:{p/a}:deliveries', 'senders', 'killed')
  t.same(await consumers(admin, 'as:{p/a}:queue', 'runners'), ['killed'])
  const taken = await survivor.queue.take(AbortSignal.timeout(5000))
  t.equal(taken.runId, 'orphan', 'the run it had read is taken over')
  // it never wrote a lease (as one that died before its first beat landed): the takeover of what no lease covers, every 10 looks, removes it
  await eventually(async () => !(await consumers(admin, 'as:{p/a}:queue', 'runners')).includes('killed'), 20_000)
  t.ok(Date.now() - killedAt >= 2000, 'not before it was idle twice the lost window')
  t.same(await consumers(admin, 'as:{p/a}:queue', 'runners'), ['survivor'], 'the live one stays')
  await eventually(async () => !(await consumers(admin, 'as:{p/a}:deliveries', 'senders')).includes('killed'), 10_000)
  t.same(await consumers(admin, 'as:{p/a}:deliveries', 'senders'), [], 'the survivor holds no delivery: it is no consumer there')
})
