import t, { type Test } from 'tap'
import { metric } from '../../helpers/admin-metrics.ts'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { startRedisCluster } from '../../helpers/redis-topologies.ts'
import { privateRunStore, type PrivateRunStore } from '../../helpers/redis-server.ts'
import { receiverFor, runsAppFor, runsClient, runsSidecarFor, type RunsApp, type RunsClient } from '../../helpers/runs-client.ts'
import { eventually, type Harness } from '../../helpers/sidecar-harness.ts'

// GET …/_runs (the app's recorded runs, newest first, paged by an opaque cursor) and
// DELETE …/_runs?status=queued (every queued run canceled), in memory and across two replicas
// sharing one Redis.

type Backend = 'memory' | 'redis'
const BACKENDS: readonly Backend[] = ['memory', 'redis']

interface Fleet {
  readonly app: RunsApp
  /** One sidecar in memory; two sharing a private Redis. */
  readonly sidecars: Harness[]
  /** A client of each sidecar, app `p/a`. */
  readonly clients: RunsClient[]
  readonly redis: PrivateRunStore | undefined
}

/** Two slots in all: REPLICA_CONCURRENCY 2 in memory, 1 on each of the two replicas. */
async function fleetOf (t: Test, backend: Backend, env: Record<string, string> = {}): Promise<Fleet> {
  const app = await runsAppFor(t)
  const redis = backend === 'redis' ? await privateRunStore(t) : undefined
  const common = { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', ...redis?.env, ...env }
  const sidecars = redis === undefined
    ? [await runsSidecarFor(t, app.url, { REPLICA_CONCURRENCY: '2', ...common })]
    : [await runsSidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1', ...common }), await runsSidecarFor(t, app.url, { REPLICA_CONCURRENCY: '1', ...common })]
  return { app, sidecars, clients: sidecars.map(h => runsClient({ base: h.base })), redis }
}

const listOf = async (client: RunsClient, query = '', method = 'GET'): Promise<SentResponse> =>
  await send(`${client.runUrl('').slice(0, -1)}${query}`, { method, headers: client.headers() })

/** A page's body as JSON. */
interface Page { runs: Array<Record<string, unknown>>, next_cursor: string | null }
const pageOf = (r: SentResponse): Page => r.json() as Page
const idsOf = (r: SentResponse): string[] => pageOf(r).runs.map(run => run.run_id as string)

/** The record `GET …/_runs/{id}` answers, without its result, as the list writes it. */
async function listed (client: RunsClient, runId: string): Promise<string> {
  const record = (await client.read(runId)).record
  delete record.result
  return JSON.stringify(record)
}

/** Every page from `query` on, following next_cursor (with `limit`, not carried by the cursor), until it is null. */
async function allPages (t: Test, client: RunsClient, query: string, limit: number): Promise<string[][]> {
  const pages: string[][] = []
  let r = await listOf(client, query)
  for (;;) {
    t.equal(r.status, 200, r.text)
    const page = pageOf(r)
    pages.push(page.runs.map(run => run.run_id as string))
    if (page.next_cursor === null) return pages
    t.match(page.next_cursor, /^[A-Za-z0-9_-]+$/, 'the cursor is URL-safe')
    r = await listOf(client, `?cursor=${page.next_cursor}&limit=${limit}`)
  }
}

for (const backend of BACKENDS) {
  t.test(`${backend}: the app's runs newest first, filtered by status, paged; the queued ones purged`, async t => {
    const { app, sidecars, clients, redis } = await fleetOf(t, backend)
    const receiver = await receiverFor(t)
    const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
    const on = (i: number): RunsClient => clients[i % clients.length] as RunsClient
    // r-00 … r-07, each created after the one before (ids ascending too: equal times are ordered by id)
    t.equal((await on(0).submit('/json/0', 'r-00')).status, 202)
    t.equal((await on(0).finished('r-00')).record.status, 'succeeded')
    t.equal((await on(1).submit('/status/500', 'r-01')).status, 202)
    t.equal((await on(1).finished('r-01')).record.status, 'failed')
    const keyed = await on(0).call('/json/2', { headers: { 'idempotency-key': 'key-2', 'x-request-id': 'r-02' }, body: '{}' })
    t.equal(keyed.status, 200, 'a sync call with an Idempotency-Key is recorded')
    t.equal((await on(0).finished('r-02')).record.status, 'succeeded')
    await on(1).submit('/hold/3', 'r-03')
    await app.waitForHeld(1)
    await on(0).submit('/hold/4', 'r-04')
    await app.waitForHeld(2)
    for (const n of [5, 6, 7]) t.equal((await on(n).submit(`/json/queued-${n}?${hook}`, `r-0${n}`)).status, 202)
    const all = ['r-07', 'r-06', 'r-05', 'r-04', 'r-03', 'r-02', 'r-01', 'r-00']

    // every replica lists every run, each record as GET …/_runs/{id} has it, without its result
    for (const client of clients) {
      const r = await listOf(client)
      t.equal(r.status, 200)
      t.equal(r.headers['content-type'], 'application/json; charset=utf-8')
      const records = await Promise.all(all.map(async id => await listed(client, id)))
      t.equal(r.text, `{"runs":[${records.join(',')}],"next_cursor":null}`, 'newest first, every field but result')
      t.same(pageOf(r).runs.map(run => run.status), ['queued', 'queued', 'queued', 'running', 'running', 'succeeded', 'failed', 'succeeded'])
      t.equal((await listOf(client, '/')).text, r.text, '/_runs/ is the same route')
    }
    const client = on(1)
    t.same(idsOf(await listOf(client, '?status=queued')), ['r-07', 'r-06', 'r-05'])
    t.same(idsOf(await listOf(client, '?status=succeeded,failed')), ['r-02', 'r-01', 'r-00'], 'several statuses')
    t.same(idsOf(await listOf(client, '?status=failed&status=succeeded,failed')), ['r-02', 'r-01', 'r-00'], 'status given twice: both')
    t.same(idsOf(await listOf(client, '?status=running')), ['r-04', 'r-03'])
    t.equal((await listOf(client, '?status=canceled')).text, '{"runs":[],"next_cursor":null}')
    t.equal((await listOf(client, '?limit=1000')).text, (await listOf(client)).text)

    // limit and cursor: pages to the end, next_cursor null on the last (and on a page that ends exactly at the end)
    const first = await listOf(client, '?limit=3')
    t.same(idsOf(first), ['r-07', 'r-06', 'r-05'])
    t.type(pageOf(first).next_cursor, 'string')
    t.same(await allPages(t, client, '?limit=3', 3), [['r-07', 'r-06', 'r-05'], ['r-04', 'r-03', 'r-02'], ['r-01', 'r-00']])
    t.same(await allPages(t, client, '?status=running&limit=2', 2), [['r-04', 'r-03']], 'nothing follows: null at once')
    // the cursor carries the filter, not the limit (100 unless given)
    t.same(await allPages(t, client, '?status=queued,failed,succeeded&limit=2', 2), [['r-07', 'r-06'], ['r-05', 'r-02'], ['r-01', 'r-00']])
    const cursor = pageOf(await listOf(client, '?status=queued,failed,succeeded&limit=2')).next_cursor as string
    t.same(idsOf(await listOf(client, `?cursor=${cursor}`)), ['r-05', 'r-02', 'r-01', 'r-00'])
    t.same(idsOf(await listOf(client, `?cursor=${cursor}&limit=1`)), ['r-05'], 'a cursor with another limit')
    t.same(idsOf(await listOf(on(0), `?status=succeeded,queued,failed&cursor=${cursor}`)), ['r-05', 'r-02', 'r-01', 'r-00'], 'with its own status, on the other replica')
    const otherFilter = await listOf(client, `?status=running&cursor=${cursor}`)
    t.equal(otherFilter.status, 400)
    t.equal(otherFilter.text, '{"message":"cursor was made for another status filter"}')

    // 400s
    const badLimit = '{"message":"limit must be a whole number from 1 to 1000"}'
    const badStatus = '{"message":"status must be one or more of queued, running, succeeded, failed, canceled, separated by commas"}'
    const badCursor = '{"message":"malformed cursor"}'
    const garbage = Buffer.from('{"s":"","t":-1,"id":"x"}').toString('base64url')
    const bad: Array<[string, string]> = [
      ['?limit=0', badLimit], ['?limit=1001', badLimit], ['?limit=abc', badLimit], ['?limit=', badLimit], ['?limit=-1', badLimit], ['?limit=1.5', badLimit],
      ['?status=bogus', badStatus], ['?status=queued,bogus', badStatus], ['?status=', badStatus], ['?status=queued,', badStatus], ['?status=QUEUED', badStatus],
      ['?cursor=not-a-cursor', badCursor], ['?cursor=', badCursor], ['?cursor=%2B%2F', badCursor], [`?cursor=${garbage}`, badCursor], [`?cursor=${cursor}x`, badCursor],
      ['?limit=1&limit=2', '{"message":"limit given more than once"}'], ['?status=queued&status=', badStatus]
    ]
    for (const [query, message] of bad) {
      const r = await send(`${client.runUrl('').slice(0, -1)}${query}`, { headers: { 'x-request-id': 'bad-list' } })
      t.equal(r.status, 400, query)
      t.equal(r.text, message, query)
      t.equal(r.headers['x-request-id'], 'bad-list')
    }

    // DELETE: status=queued only
    for (const query of ['', '?status=running', '?status=queued,running', '?status=queued&status=running', '?status=', '?status=Queued', '?limit=1']) {
      const r = await listOf(client, query, 'DELETE')
      t.equal(r.status, 400, `DELETE ${query}`)
      t.equal(r.text, '{"message":"DELETE …/_runs needs status=queued: only queued runs are purged"}')
    }
    t.same(idsOf(await listOf(client, '?status=queued')), ['r-07', 'r-06', 'r-05'], 'nothing was purged by a refused DELETE')
    const purged = await listOf(on(0), '?status=queued', 'DELETE')
    t.equal(purged.status, 200)
    t.equal(purged.headers['content-type'], 'application/json; charset=utf-8')
    t.equal(purged.text, '{"canceled":3}')
    for (const id of ['r-05', 'r-06', 'r-07']) {
      const { record } = await client.read(id)
      t.equal(record.status, 'canceled', id)
      t.same(record.error, { message: 'run canceled' })
      t.same(Object.keys(record), ['run_id', 'status', 'created_at', 'completed_at', 'error', 'webhook'], `${id}: as a cancel leaves a queued run`)
    }
    t.equal((await listOf(client, '?status=queued')).text, '{"runs":[],"next_cursor":null}')
    t.same(idsOf(await listOf(client, '?status=canceled')), ['r-07', 'r-06', 'r-05'])
    t.equal((await listOf(client, '?status=queued', 'DELETE')).text, '{"canceled":0}', 'nothing left to purge')
    t.equal(await metric(sidecars[0] as Harness, 'sidecar_runs_total', { status: 'canceled' }), 3, 'each counted as a cancel')
    if (redis !== undefined) {
      t.equal(await redis.probe.xlen('as:{p/a}:queue'), 2, 'the queue holds the two running runs alone')
      t.equal(await redis.probe.get('as:{p/a}:queued-bytes'), '0')
    }

    // the slots free: the purged runs never reach the app and send no webhook; a run after them does both
    for (const held of app.held) held.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    await on(0).submit(`/json/after?${hook}`, 'r-08')
    await receiver.waitForAttempts(1)
    t.equal((await client.finished('r-08')).record.status, 'succeeded')
    t.same(receiver.attempts.map(a => a.headers['x-request-id']), ['r-08'], 'no webhook for a purged run')
    t.same(app.requests.map(r => r.url).sort(), ['/hold/3', '/hold/4', '/json/0', '/json/2', '/json/after', '/status/500'], 'the purged runs never reached the app')
    t.same(idsOf(await listOf(client)), ['r-08', ...all])
  })

  // in memory a purge and a start never interleave; in Redis they run on two replicas at once
  if (backend === 'redis') t.test(`${backend}: a purge racing the runners: each run is canceled or run, never both, and the count says how many were canceled`, async t => {
    const { app, clients } = await fleetOf(t, backend)
    const ids = Array.from({ length: 30 }, (_, i) => `race-${String(i).padStart(2, '0')}`)
    const submit = async (id: string, i: number): Promise<number> => (await (clients[i % clients.length] as RunsClient).submit(`/json/${id}`, id)).status
    // half submitted at once, then the purge while the other half comes: the runners take some meanwhile
    const firstHalf = await Promise.all(ids.slice(0, 15).map(submit))
    const [purged, ...secondHalf] = await Promise.all([listOf(clients[0] as RunsClient, '?status=queued', 'DELETE'), ...ids.slice(15).map(async (id, i) => await submit(id, i + 15))])
    t.same([...firstHalf, ...secondHalf], ids.map(() => 202))
    t.equal(purged?.status, 200)
    const { canceled } = (purged).json() as { canceled: number }
    const statuses = await Promise.all(ids.map(async id => (await (clients[0] as RunsClient).finished(id)).record.status))
    const ran = app.requests.map(r => r.url.slice('/json/'.length))
    t.equal(statuses.filter(s => s === 'canceled').length, canceled, `${canceled} canceled`)
    for (const [i, id] of ids.entries()) {
      t.equal(statuses[i] === 'canceled' ? 0 : 1, ran.filter(ranId => ranId === id).length, `${id}: ${statuses[i] as string}, and reached the app that many times`)
    }
    t.same(idsOf(await listOf(clients[0] as RunsClient, '?status=queued,running')), [], 'nothing left queued')
  })

  t.test(`${backend}: a call whose Prefer: wait ran out is listed as the run it became`, async t => {
    const { app, clients } = await fleetOf(t, backend)
    const client = clients[clients.length - 1] as RunsClient
    await client.submit('/json', 'before')
    t.equal((await client.finished('before')).record.status, 'succeeded')
    const waited = await client.call('/hold', { method: 'GET', headers: { prefer: 'wait=1', 'x-request-id': 'waited' } })
    t.equal(waited.status, 202)
    t.same(idsOf(await listOf(clients[0] as RunsClient, '?status=running')), ['waited'])
    t.equal((await listOf(clients[0] as RunsClient)).text, `{"runs":[${await listed(client, 'waited')},${await listed(client, 'before')}],"next_cursor":null}`)
    ;(app.held[0] as RunsApp['held'][number]).res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    t.equal((await client.finished('waited')).record.status, 'succeeded')
    t.same(idsOf(await listOf(clients[0] as RunsClient, '?status=succeeded')), ['waited', 'before'])
  })

  t.test(`${backend}: finished runs expire from the list with their records; a running one stays`, async t => {
    const { app, clients, redis } = await fleetOf(t, backend, { RUN_RETENTION_SECONDS: '1' })
    const client = clients[0] as RunsClient
    await client.submit('/json', 'short-lived')
    t.equal((await client.finished('short-lived')).record.status, 'succeeded')
    await client.submit('/hold/1', 'long-running')
    await app.waitForHeld(1)
    t.same(idsOf(await listOf(client)), ['long-running', 'short-lived'])
    await eventually(async () => (await send(client.runUrl('short-lived'))).status === 404, 10_000)
    await client.submit('/hold/2', 'later')
    await app.waitForHeld(2)
    t.equal((await listOf(client)).text, `{"runs":[${await listed(client, 'later')},${await listed(client, 'long-running')}],"next_cursor":null}`)
    if (redis !== undefined) {
      t.same(await redis.probe.zrange('as:{p/a}:runs:running', '0', '-1'), ['long-running', 'later'], 'the running index keeps the runs held')
      t.equal(await redis.probe.exists('as:{p/a}:runs:succeeded'), 0, 'the expired run left its index as the listing met it')
    }
    for (const held of app.held) held.res.writeHead(200).end('{}')
    t.equal((await client.finished('long-running')).record.status, 'succeeded')
    t.equal((await client.finished('later')).record.status, 'succeeded')
  })
}

t.test('the list route: methods, HEAD, another app, and the call\'s route and auth checks', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url)
  const token = await h.token('proj')
  const client = runsClient({ base: h.base, project: 'proj', app: 'app', token })
  await client.submit('/json', 'one')
  t.equal((await client.finished('one')).record.status, 'succeeded')
  const url = client.runUrl('').slice(0, -1)
  const list = await send(url, { headers: client.headers() })
  t.equal(list.text, `{"runs":[${await listed(client, 'one')}],"next_cursor":null}`)

  for (const method of ['POST', 'PUT', 'PATCH', 'OPTIONS']) {
    const r = await send(url, { method, headers: client.headers() })
    t.equal(r.status, 405, method)
    t.equal(r.headers.allow, 'GET, HEAD, DELETE')
    t.equal(r.text, '{"message":"method not allowed"}')
  }
  const head = await send(url, { method: 'HEAD', headers: client.headers() })
  t.equal(head.status, 200)
  t.equal(head.text, '')
  t.equal(head.headers['content-length'], String(Buffer.byteLength(list.text)))
  // however spelled, as the other _runs routes
  for (const path of ['/%5Fruns', '//_runs', '/_runs//', '/%5fruns/']) t.equal((await send(`${h.base}${client.prefix}${path}`, { headers: client.headers() })).text, list.text, path)

  for (const method of ['GET', 'DELETE']) {
    const query = method === 'DELETE' ? '?status=queued' : ''
    const missing = await send(url + query, { method })
    t.equal(missing.status, 401, `${method}: no token`)
    t.equal(missing.text, '{"message":"missing bearer token"}')
    const forbidden = await send(url + query, { method, headers: { authorization: `Bearer ${await h.token('other')}` } })
    t.equal(forbidden.status, 403, `${method}: another project's token`)
    t.equal(forbidden.text, '{"message":"token is not valid for this project"}')
  }
  const otherApp = await send(`${h.base}/v4/proj/other-app/_runs`, { headers: client.headers() })
  t.equal(otherApp.text, '{"runs":[],"next_cursor":null}', 'another app\'s list holds none of this app\'s runs')
  t.equal((await send(`${h.base}/v4/proj/other-app/_runs?status=queued`, { method: 'DELETE', headers: client.headers() })).text, '{"canceled":0}')
  t.same(app.requests.map(r => r.url), ['/json'], 'the list never reaches the app')
})

t.test('PROJECT_ID and APP_NAME: another app\'s list is the route\'s 404', async t => {
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', PROJECT_ID: 'p', APP_NAME: 'a' })
  for (const path of ['/v4/p/other/_runs', '/v4/other/a/_runs']) {
    for (const method of ['GET', 'DELETE']) {
      const r = await send(`${h.base}${path}?status=queued`, { method })
      t.equal(r.status, 404, `${method} ${path}`)
      t.equal(r.text, '{"message":"no such app"}')
    }
  }
  t.equal((await send(`${h.base}/v4/p/a/_runs`)).text, '{"runs":[],"next_cursor":null}')
})

t.test('Redis Cluster: the list and the purge run in the app\'s slot', async t => {
  const cluster = await startRedisCluster(t)
  if (cluster === undefined) return
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', RUN_STORE_URL: cluster.url, PROJECT_ID: 'p', APP_NAME: 'a' })
  const client = runsClient({ base: h.base })
  await client.submit('/hold', 'c-0')
  await app.waitForHeld(1)
  for (const id of ['c-1', 'c-2']) t.equal((await client.submit('/json', id)).status, 202)
  const all = await listOf(client)
  t.equal(all.text, `{"runs":[${await listed(client, 'c-2')},${await listed(client, 'c-1')},${await listed(client, 'c-0')}],"next_cursor":null}`)
  t.same(await allPages(t, client, '?limit=2', 2), [['c-2', 'c-1'], ['c-0']])
  t.equal((await listOf(client, '?status=queued', 'DELETE')).text, '{"canceled":2}')
  t.same(pageOf(await listOf(client)).runs.map(run => run.status), ['canceled', 'canceled', 'running'])
  ;(app.held[0] as RunsApp['held'][number]).res.writeHead(200).end('{}')
  t.equal((await client.finished('c-0')).record.status, 'succeeded')
  t.same(app.requests.map(r => r.url), ['/hold'], 'the purged runs never reached the app')
})
