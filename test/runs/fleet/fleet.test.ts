import type { ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { fetchMetrics, sampleValue } from '../../helpers/admin-metrics.ts'
import { send } from '../../helpers/http-client.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'
import { eventually, startTestServer, type TestServer } from '../../helpers/sidecar-harness.ts'
import { startSidecarProcess, type SidecarProcess } from '../../helpers/sidecar-process.ts'
import { patient } from '../../helpers/timing.ts'
import { startWebhookReceiver } from '../../helpers/webhook-receiver.ts'

// Two sidecar processes, each in front of its own app, sharing one private redis-server.

interface App extends TestServer { held: ServerResponse[] }

async function startApp (t: Test, holdMs = 0): Promise<App> {
  const held: ServerResponse[] = []
  const app = await startTestServer((req, res, body) => {
    if (req.url?.startsWith('/hold')) { held.push(res); return }
    setTimeout(() => { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ echo: body.toString() })) }, holdMs)
  })
  t.teardown(() => app.close())
  return Object.assign(app, { held })
}

async function fleet (t: Test, env: Record<string, string> = {}, holdMs = 0): Promise<{ apps: [App, App], sidecars: [SidecarProcess, SidecarProcess], redis: Awaited<ReturnType<typeof startPrivateRedis>> }> {
  const redis = await startPrivateRedis(t)
  const apps: [App, App] = [await startApp(t, holdMs), await startApp(t, holdMs)]
  const common = { DISABLE_AUTH: 'true', PROJECT_ID: 'p', APP_NAME: 'a', RUN_STORE_URL: redis.url, REPLICA_CONCURRENCY: '1', ...env }
  const sidecars: [SidecarProcess, SidecarProcess] = [
    await startSidecarProcess(t, { ...common, APP_URL: apps[0].url }),
    await startSidecarProcess(t, { ...common, APP_URL: apps[1].url })
  ]
  return { apps, sidecars, redis }
}

const record = async (sidecar: SidecarProcess, runId: string): Promise<Record<string, unknown>> =>
  (await send(`${sidecar.base}/v4/p/a/_runs/${runId}`)).json() as Record<string, unknown>

t.test('ten async runs sent to one replica run on both, each once; the backlog shows on either admin port', async t => {
  const { apps, sidecars } = await fleet(t, {}, 300)
  const ids = Array.from({ length: 10 }, (_, i) => `spread-${i}`)
  for (const id of ids) {
    const r = await send(`${sidecars[0].base}/v4/p/a/work?async=true`, { method: 'POST', headers: { 'x-request-id': id }, body: id })
    t.equal(r.status, 202)
  }
  const backlog = sampleValue(await fetchMetrics(sidecars[1].admin), 'sidecar_async_queued_runs') as number
  t.ok(backlog >= 5 && backlog <= 9, `the other replica sees the backlog (${backlog})`)
  await eventually(async () => {
    for (const id of ids) if ((await record(sidecars[1], id)).status !== 'succeeded') return false
    return true
  }, 15_000)
  const seen = [...apps[0].requests, ...apps[1].requests].map(r => r.headers['x-request-id']).sort()
  t.same(seen, [...ids].sort(), 'every run reached an app exactly once')
  t.ok(apps[0].requests.length > 0 && apps[1].requests.length > 0, `both replicas ran some (${apps[0].requests.length} + ${apps[1].requests.length})`)
})

t.test('a run on one replica is read, followed and canceled on the other', async t => {
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const { apps, sidecars } = await fleet(t, { WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const hook = encodeURIComponent(receiver.url)
  await send(`${sidecars[0].base}/v4/p/a/hold?async=true&webhookEndpoint=${hook}`, { method: 'POST', headers: { 'x-request-id': 'cross' } })
  await eventually(() => apps[0].held.length + apps[1].held.length === 1)
  const held = (apps[0].held[0] ?? apps[1].held[0]) as ServerResponse
  const runner = apps[0].held.length === 1 ? sidecars[0] : sidecars[1]
  const other = runner === sidecars[0] ? sidecars[1] : sidecars[0]
  t.equal((await record(other, 'cross')).status, 'running')
  const events = fetch(`${other.base}/v4/p/a/_runs/cross/events`).then(async r => await r.text())
  const appClosed = new Promise(resolve => held.once('close', resolve))
  const canceledAt = performance.now()
  const canceled = await send(`${other.base}/v4/p/a/_runs/cross/cancel`, { method: 'POST' })
  t.equal(canceled.status, 200)
  await appClosed
  // 1 s on a quiet machine by the cancel's pub/sub message; the other way it could learn, its next heartbeat, is 10 s away
  t.ok(performance.now() - canceledAt < patient(1000), 'the replica running it aborts the app request at once, not at its next heartbeat')
  t.match(await events, /^id: cross\.done\nevent: done\ndata: \{"run_id":"cross","status":"canceled"/)
  const [delivery] = await receiver.waitForAttempts(1, 10_000)
  const body = JSON.parse(delivery?.body.toString() ?? '{}') as Record<string, unknown>
  t.equal(body.status_code, 499)
  t.same(body.result, { message: 'run canceled' })
})

t.test('Redis stopped and restarted: plain calls never fail; recorded runs answer 503 meanwhile, then work again', async t => {
  const { sidecars, redis } = await fleet(t)
  let plainFailures = 0
  let plainCalls = 0
  let stop = false
  const traffic = (async () => {
    while (!stop) {
      for (const sidecar of sidecars) {
        plainCalls++
        if ((await send(`${sidecar.base}/v4/p/a/plain`, { method: 'POST', body: 'x' })).status !== 200) plainFailures++
      }
    }
  })()
  await redis.stop()
  await eventually(async () => (await send(`${sidecars[0].base}/v4/p/a/x?async=true`, { method: 'POST' })).status === 503, 10_000)
  const refused = await send(`${sidecars[1].base}/v4/p/a/_runs/any`)
  t.equal(refused.status, 503)
  t.equal(refused.headers['retry-after'], '1')
  t.equal(refused.text, '{"message":"run store unavailable"}')
  await redis.start()
  let accepted: string | undefined
  await eventually(async () => {
    const r = await send(`${sidecars[1].base}/v4/p/a/x?async=true`, { method: 'POST' })
    if (r.status === 202) accepted = r.headers['x-request-id'] as string
    return r.status === 202
  }, 15_000)
  await eventually(async () => (await record(sidecars[0], accepted as string)).status === 'succeeded', 15_000)
  stop = true
  await traffic
  t.equal(plainFailures, 0, `no plain call failed (${plainCalls} made)`)
})

t.test('SIGTERM: runs still queued stay for the other replica; the stopping one finishes its own and exits 0', async t => {
  const { apps, sidecars } = await fleet(t, {}, 0)
  await send(`${sidecars[0].base}/v4/p/a/hold?async=true`, { method: 'POST', headers: { 'x-request-id': 'in-flight' } })
  await send(`${sidecars[0].base}/v4/p/a/hold?async=true`, { method: 'POST', headers: { 'x-request-id': 'second' } })
  await eventually(() => apps[0].held.length === 1 && apps[1].held.length === 1)
  const first = apps[0].requests[0]?.headers['x-request-id']
  await send(`${sidecars[0].base}/v4/p/a/echo?async=true`, { method: 'POST', headers: { 'x-request-id': 'left-queued' } })
  sidecars[0].child.process.kill('SIGTERM')
  await new Promise(resolve => setTimeout(resolve, 300)) // the drain has begun: replica 0 takes nothing new
  ;(apps[1].held[0] as ServerResponse).writeHead(200).end('{}')
  await eventually(async () => (await record(sidecars[1], 'left-queued')).status === 'succeeded', 10_000)
  t.equal(apps[0].requests.filter(r => r.url.startsWith('/echo')).length, 0, 'the stopping replica took no new run')
  ;(apps[0].held[0] as ServerResponse).writeHead(200).end('{}')
  t.equal(await sidecars[0].child.exited, 0)
  t.equal((await record(sidecars[1], first as string)).status, 'succeeded', 'its own run finished within the grace period')
})

t.test('Idempotency-Key: the same key sent to both replicas at the same instant runs once; either replica replays it, the record readable on both', async t => {
  const { apps, sidecars } = await fleet(t, {}, 200)
  const keys = Array.from({ length: 10 }, (_, i) => `fleet-key-${i}`)
  const answers = await Promise.all(keys.flatMap(key => sidecars.map(async sidecar =>
    await send(`${sidecar.base}/v4/p/a/work`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: `{"key":"${key}"}` }))))
  const calls = [...apps[0].requests, ...apps[1].requests]
  for (const key of keys) t.equal(calls.filter(r => r.body.toString() === `{"key":"${key}"}`).length, 1, `${key} reached an app once`)
  const firsts = answers.filter(r => r.status === 200 && r.headers['idempotent-replayed'] === undefined)
  t.equal(firsts.length, keys.length, 'one first answer per key')
  t.ok(answers.every(r => r.status === 200 || r.text === '{"message":"a request with this Idempotency-Key is in progress"}'), answers.map(r => r.status).join(' '))
  for (const first of firsts) {
    const runId = first.headers['x-request-id'] as string
    for (const sidecar of sidecars) t.equal((await record(sidecar, runId)).status, 'succeeded', `${runId}: the record is on both replicas`)
  }
  for (const key of keys) {
    for (const sidecar of sidecars) {
      const replay = await send(`${sidecar.base}/v4/p/a/work`, { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body: `{"key":"${key}"}` })
      t.equal(replay.headers['idempotent-replayed'], 'true')
      t.same(replay.body, firsts.find(f => f.headers['x-request-id'] === replay.headers['x-request-id'])?.body, `${key}: the same answer`)
    }
  }
  t.equal([...apps[0].requests, ...apps[1].requests].length, keys.length, 'no repeat reached an app')
})

t.test('autoscaling: both replicas report the app-wide backlog and runs in progress, exact after starts and a cancel of a queued run', async t => {
  const { apps, sidecars } = await fleet(t)
  const counts = async (sidecar: SidecarProcess): Promise<Array<number | undefined>> => {
    const text = await fetchMetrics(sidecar.admin)
    return [sampleValue(text, 'sidecar_async_queued_runs'), sampleValue(text, 'sidecar_async_running_runs')]
  }
  const both = async (): Promise<unknown> => await Promise.all(sidecars.map(counts))
  t.same(await both(), [[0, 0], [0, 0]], 'nothing submitted: [queued, running] on each replica')
  const ids = ['scale-1', 'scale-2', 'scale-3', 'scale-4']
  for (const id of ids) t.equal((await send(`${sidecars[0].base}/v4/p/a/hold?async=true`, { method: 'POST', headers: { 'x-request-id': id } })).status, 202)
  await eventually(() => apps[0].held.length === 1 && apps[1].held.length === 1)
  t.same(await both(), [[2, 2], [2, 2]], 'one running on each replica (REPLICA_CONCURRENCY 1), two waiting')
  const started = [...apps[0].requests, ...apps[1].requests].map(r => r.headers['x-request-id'])
  const waiting = ids.filter(id => !started.includes(id))
  t.equal((await send(`${sidecars[1].base}/v4/p/a/_runs/${waiting[0] as string}/cancel`, { method: 'POST' })).status, 200)
  t.same(await both(), [[1, 2], [1, 2]], 'a queued run canceled: the backlog is one less')
  ;(apps[0].held[0] as ServerResponse).writeHead(200).end('{}')
  await eventually(async () => (await record(sidecars[1], waiting[1] as string)).status === 'running')
  t.same(await both(), [[0, 2], [0, 2]], 'a run ended and the last waiting one started in its place')
  for (const held of [...apps[0].held, ...apps[1].held]) if (!held.writableEnded) held.writeHead(200).end('{}')
  await eventually(async () => {
    for (const id of [...started, waiting[1]]) if ((await record(sidecars[0], id as string)).status !== 'succeeded') return false
    return true
  })
  t.same(await both(), [[0, 0], [0, 0]], 'every run ended')
})
