import type { ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { scrapeMetrics, sumOf } from '../../helpers/admin-metrics.ts'
import { send } from '../../helpers/http-client.ts'
import { startRedisCluster } from '../../helpers/redis-topologies.ts'
import { runsClient } from '../../helpers/runs-client.ts'
import { eventually, startTestServer, type TestServer } from '../../helpers/sidecar-harness.ts'
import { startSidecarProcess, type SidecarProcess } from '../../helpers/sidecar-process.ts'
import { startWebhookReceiver } from '../../helpers/webhook-receiver.ts'

// A three-master Redis Cluster started here, two apps whose keys live on different masters, two
// sidecar processes each (RUN_STORE_URL=redis+cluster://…): runs, records, events, keys, cancels and
// durable deliveries work, each sidecar keeps to 2 connections per node, and a slot moving under
// traffic gives 503 or success, never 500, never an internal error.

interface App extends TestServer { held: Map<string, ServerResponse> }

async function startApp (t: Test): Promise<App> {
  const held = new Map<string, ServerResponse>()
  const app = await startTestServer((req, res) => {
    if (req.url?.startsWith('/hold')) { held.set(req.headers['x-request-id'] as string, res); return }
    if (req.url?.startsWith('/stream')) {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' })
      res.end('{"n":0}\n{"n":1}\n{"n":2}\n')
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ app: req.url }))
  })
  t.teardown(() => app.close())
  return Object.assign(app, { held })
}

const ranIds = (apps: readonly App[]): string[] => apps.flatMap(app => app.requests.map(r => r.headers['x-request-id'] as string)).sort()

t.test('two apps on a three-master cluster, two sidecars each', async t => {
  const cluster = await startRedisCluster(t)
  if (cluster === undefined) return
  // two app names whose hash tags fall on different masters
  const names: string[] = []
  const masters = new Set<string>()
  for (let i = 0; names.length < 2; i++) {
    const node = await cluster.nodeFor(`as:{p/app${i}}:queue`)
    if (!masters.has(node)) {
      masters.add(node)
      names.push(`app${i}`)
    }
  }
  const [a, b] = names as [string, string]
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const hook = encodeURIComponent(receiver.url)
  const apps = [await startApp(t), await startApp(t), await startApp(t), await startApp(t)] as const
  const common = { DISABLE_AUTH: 'true', PROJECT_ID: 'p', RUN_STORE_URL: cluster.url, WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', REPLICA_CONCURRENCY: '2' }
  const sidecars: readonly SidecarProcess[] = [
    await startSidecarProcess(t, { ...common, APP_NAME: a, HOSTNAME: 'a-0', APP_URL: apps[0].url }),
    await startSidecarProcess(t, { ...common, APP_NAME: a, HOSTNAME: 'a-1', APP_URL: apps[1].url }),
    await startSidecarProcess(t, { ...common, APP_NAME: b, HOSTNAME: 'b-0', APP_URL: apps[2].url }),
    await startSidecarProcess(t, { ...common, APP_NAME: b, HOSTNAME: 'b-1', APP_URL: apps[3].url })
  ]
  const [a0, a1, b0, b1] = sidecars as [SidecarProcess, SidecarProcess, SidecarProcess, SidecarProcess]
  const clients = { a0: runsClient({ base: a0.base, app: a }), a1: runsClient({ base: a1.base, app: a }), b0: runsClient({ base: b0.base, app: b }), b1: runsClient({ base: b1.base, app: b }) }

  t.test('runs: each app\'s runs on its own replicas, each once, read on either, webhooks delivered', async t => {
    const ids = { a: ['a-1', 'a-2', 'a-3', 'a-4', 'a-5', 'a-6'], b: ['b-1', 'b-2', 'b-3', 'b-4', 'b-5', 'b-6'] }
    for (const id of ids.a) t.equal((await send(`${a0.base}/v4/p/${a}/work?async=true&webhookEndpoint=${hook}`, { method: 'POST', headers: { 'x-request-id': id } })).status, 202, id)
    for (const id of ids.b) t.equal((await send(`${b1.base}/v4/p/${b}/work?async=true&webhookEndpoint=${hook}`, { method: 'POST', headers: { 'x-request-id': id } })).status, 202, id)
    await receiver.waitForAttempts(12, 20_000)
    t.same(ranIds([apps[0], apps[1]]), ids.a, 'app a\'s replicas ran a\'s runs, each once')
    t.same(ranIds([apps[2], apps[3]]), ids.b, 'app b\'s replicas ran b\'s runs, each once')
    for (const id of ids.a) t.equal((await clients.a1.finished(id)).record.status, 'succeeded')
    for (const id of ids.b) t.equal((await clients.b0.finished(id)).record.status, 'succeeded')
    t.same(receiver.attempts.map(attempt => (JSON.parse(attempt.body.toString()) as { run_id: string }).run_id).sort(), [...ids.a, ...ids.b].sort(), 'one webhook each')
  })

  t.test('events: a streamed run followed on the other replica, whole and in order', async t => {
    t.equal((await clients.a0.submit('/stream', 'streamed')).status, 202)
    await clients.a1.finished('streamed')
    const events = await send(clients.a1.runUrl('streamed', '/events'))
    t.equal(events.status, 200)
    t.match(events.text, /^id: 0\ndata: \{"n":0\}\n\nid: 1\ndata: \{"n":1\}\n\nid: 2\ndata: \{"n":2\}\n\nid: streamed\.done\nevent: done\n/)
  })

  t.test('Idempotency-Key: one run for the same key on both replicas, replayed byte for byte', async t => {
    const before = apps[2].requests.length + apps[3].requests.length
    const first = await clients.b0.call('/keyed', { headers: { 'idempotency-key': 'k-1' }, body: '{}' })
    const again = await clients.b1.call('/keyed', { headers: { 'idempotency-key': 'k-1' }, body: '{}' })
    t.equal(first.status, 200)
    t.equal(again.status, 200)
    t.equal(again.text, first.text)
    t.equal(apps[2].requests.length + apps[3].requests.length - before, 1, 'the app ran it once')
  })

  t.test('a cancel reaches the replica running the run, not the other app\'s run of the same id', async t => {
    t.equal((await clients.a0.submit('/hold', 'twin')).status, 202)
    t.equal((await clients.b0.submit('/hold', 'twin')).status, 202)
    await eventually(() => (apps[0].held.has('twin') || apps[1].held.has('twin')) && (apps[2].held.has('twin') || apps[3].held.has('twin')))
    const heldA = (apps[0].held.get('twin') ?? apps[1].held.get('twin')) as ServerResponse
    const heldB = (apps[2].held.get('twin') ?? apps[3].held.get('twin')) as ServerResponse
    const closed = new Promise(resolve => heldA.once('close', resolve))
    t.equal((await clients.a1.cancel('twin')).status, 200)
    await closed
    t.equal(heldB.destroyed, false)
    heldB.writeHead(200, { 'content-type': 'application/json' }).end('{"b":1}')
    t.equal((await clients.b1.finished('twin')).record.status, 'succeeded')
    t.equal((await clients.a0.finished('twin')).record.status, 'canceled')
  })

  t.test('a plain sync call is canceled through the other replica (SPUBLISH\'s receivers counted), not the other app\'s call of the same id', async t => {
    const pending = clients.a0.call('/hold', { headers: { 'x-request-id': 'plain-twin' } })
    const other = clients.b0.call('/hold', { headers: { 'x-request-id': 'plain-twin' } })
    await eventually(() => apps[0].held.has('plain-twin') && apps[2].held.has('plain-twin'))
    const cancel = await clients.a1.cancel('plain-twin')
    t.equal(cancel.status, 200)
    t.equal(cancel.text, '{"run_id":"plain-twin","status":"canceled"}')
    const answer = await pending
    t.equal(answer.status, 499)
    t.equal(answer.text, '{"message":"run canceled"}')
    t.equal((await clients.a1.cancel('nowhere')).status, 404, 'an id in flight nowhere: every replica said no')
    ;(apps[2].held.get('plain-twin') as ServerResponse).end('{"b":1}')
    t.equal((await other).status, 200, 'app b\'s call of the same id went on')
  })

  t.test('at most 2 connections per sidecar to each node, each named app-sidecar:<project>/<app>:<replica>', async t => {
    for (const replica of ['a-0', 'a-1', 'b-0', 'b-1']) {
      const app = replica.startsWith('a') ? a : b
      const counts = await cluster.clientCount(`app-sidecar:p/${app}:${replica}`)
      for (const [node, count] of Object.entries(counts)) t.ok(count <= 2, `${replica} holds ${count} connections to ${node}`)
      t.ok(Object.values(counts).reduce((sum, n) => sum + n, 0) >= 2, `${replica} is connected`)
    }
    const unnamed = await cluster.clientCount('ioredis')
    t.same(Object.values(unnamed).filter(n => n > 0), [], 'no connection of ioredis\'s own (a subscriber)')
  })

  t.test('app a\'s slot moves to another master under traffic: 503 or success, never 500; then everything works', async t => {
    const slot = await cluster.slotOf(`as:{p/${a}}:queue`)
    const from = await cluster.nodeFor(`as:{p/${a}}:queue`)
    const to = cluster.nodes.find(node => node !== from) as string
    const statuses: number[] = []
    let n = 0
    let moving = true
    const traffic = (async () => {
      while (moving) {
        const id = `moving-${n++}`
        const r = await send(`${(n % 2 === 0 ? a0 : a1).base}/v4/p/${a}/work?async=true`, { method: 'POST', headers: { 'x-request-id': id } })
        statuses.push(r.status)
      }
    })()
    await cluster.migrateSlot(slot, to, {
      midway: async () => { await new Promise(resolve => setTimeout(resolve, 300)) } // ASK for the moved keys meanwhile
    })
    await new Promise(resolve => setTimeout(resolve, 500))
    moving = false
    await traffic
    t.ok(statuses.length > 5, `${statuses.length} submits while it moved`)
    t.same([...new Set(statuses)].filter(status => status !== 202 && status !== 503), [], 'only 202 or 503')
    t.equal(await cluster.nodeFor(`as:{p/${a}}:queue`), to)
    // every run accepted runs; new ones too, and cancels still reach the running replica
    for (let i = 0; i < n; i++) {
      if (statuses[i] === 202) t.equal((await clients.a0.finished(`moving-${i}`, 20_000)).record.status, 'succeeded', `moving-${i}`)
    }
    t.equal((await clients.a1.submit('/hold', 'after-move')).status, 202)
    await eventually(() => apps[0].held.has('after-move') || apps[1].held.has('after-move'))
    t.equal((await clients.a0.cancel('after-move')).status, 200)
    t.equal((await clients.a1.finished('after-move')).record.status, 'canceled')
  })

  t.test('the persistence check reads every master: one appendonly warn line for each', async t => {
    const lines = a0.child.lines.filter(line => line.setting === 'appendonly')
    t.same(lines.map(line => line.node).sort(), cluster.nodes.map(url => new URL(url).host).sort())
    t.equal(a0.child.lines.filter(line => line.setting === 'maxmemory-policy').length, 0, 'noeviction: nothing said')
  })

  t.test('no internal error on any sidecar', async t => {
    for (const sidecar of sidecars) t.equal(sumOf(await scrapeMetrics(sidecar.admin), 'sidecar_internal_errors_total'), 0, sidecar.base)
  })
})
