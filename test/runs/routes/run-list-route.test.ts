import t from 'tap'
import { MalformedRequestError, RunStoreUnavailableError } from '../../../src/errors.ts'
import { createRunList } from '../../../src/runs/routes/run-list-route.ts'
import type { RunStatus } from '../../../src/runs/run-data.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import { countingCounter, fakeCalls } from '../../helpers/fake-call.ts'
import { finishedRun, held, iso, memoryStore, OTHER_SCOPE, queuedJson, queuedRun, refusal, runningRun, runRoute, SCOPE, storeWith, succeededJson, unreachableStore } from './run-routes-kit.ts'

// `GET …/_runs` (the app's runs, a page at a time, newest first) and `DELETE …/_runs?status=queued`
// (its queued runs canceled): docs/runs.md.

const call = await fakeCalls(t)
const LIST = '/v4/p1/a1/_runs'

/** The cursor a page ends with, as the caller reads it: base64url of its JSON. */
const cursor = (s: string, time: number, id: string): string => Buffer.from(JSON.stringify({ s, t: time, id })).toString('base64url')

function listing (store: RunStore): { serve: ReturnType<typeof createRunList>, runsTotal: ReturnType<typeof countingCounter<RunStatus>> } {
  const runsTotal = countingCounter<RunStatus>()
  return { serve: createRunList({ store, runsTotal }), runsTotal }
}

t.test('an app with no runs: an empty page', async t => {
  const { serve } = listing(memoryStore(t))
  const c = await call({ method: 'GET', path: LIST, headers: { 'x-request-id': 'lister-1' } })
  await serve(c, runRoute('list'))
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, '{"runs":[],"next_cursor":null}')
  t.equal(got?.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(got?.headers['content-length'], String(got?.body.length))
  t.equal(got?.headers['x-request-id'], 'lister-1', 'the request\'s own run id')
  t.same(c.answered, [])
})

t.test('every run of the app, newest first, records without results; other apps\' runs are not listed', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  await finishedRun(store, 'done', base)
  await runningRun(store, 'active', base + 1)
  await queuedRun(store, 'other-app', base + 2, OTHER_SCOPE)
  await queuedRun(store, 'waiting', base + 3)
  const { serve } = listing(store)
  const c = await call({ method: 'GET', path: LIST })
  await serve(c, runRoute('list'))
  const active = `{"run_id":"active","status":"running","created_at":"${iso(base + 1)}","started_at":"${iso(base + 6)}","queue_time_ms":5}`
  t.equal((await c.got)?.body, `{"runs":[${queuedJson('waiting', base + 3)},${active},${succeededJson('done', base, null)}],"next_cursor":null}`)
})

t.test('equal creation times are ordered by run id, descending', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  for (const runId of ['b', 'c', 'a']) await queuedRun(store, runId, base)
  const c = await call({ method: 'GET', path: LIST })
  await listing(store).serve(c, runRoute('list'))
  t.equal((await c.got)?.body, `{"runs":[${queuedJson('c', base)},${queuedJson('b', base)},${queuedJson('a', base)}],"next_cursor":null}`)
})

t.test('pages of `limit` runs, each with the cursor of the next; the last with null', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  for (let i = 0; i < 5; i++) await queuedRun(store, `r${i}`, base + i)
  const { serve } = listing(store)
  const page = async (query: string): Promise<string | undefined> => {
    const c = await call({ method: 'GET', path: `${LIST}?${query}` })
    await serve(c, runRoute('list', '', query))
    return (await c.got)?.body
  }
  const first = cursor('', base + 3, 'r3')
  t.equal(await page('limit=2'), `{"runs":[${queuedJson('r4', base + 4)},${queuedJson('r3', base + 3)}],"next_cursor":"${first}"}`)
  const second = cursor('', base + 1, 'r1')
  t.equal(await page(`limit=2&cursor=${first}`), `{"runs":[${queuedJson('r2', base + 2)},${queuedJson('r1', base + 1)}],"next_cursor":"${second}"}`)
  t.equal(await page(`limit=2&cursor=${second}`), `{"runs":[${queuedJson('r0', base)}],"next_cursor":null}`)
  t.equal(await page('limit=5'), `{"runs":[${[4, 3, 2, 1, 0].map(i => queuedJson(`r${i}`, base + i)).join(',')}],"next_cursor":null}`,
    'a page holding exactly the last run has no next one')
})

t.test('a status filter, carried by the cursor to the next pages', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  await finishedRun(store, 'f0', base)
  await queuedRun(store, 'q1', base + 1)
  await queuedRun(store, 'q2', base + 2)
  await queuedRun(store, 'c3', base + 3)
  await store.records.cancel(SCOPE, 'c3')
  await queuedRun(store, 'q4', base + 4)
  const { serve } = listing(store)
  const page = async (query: string): Promise<string | undefined> => {
    const c = await call({ method: 'GET', path: `${LIST}?${query}` })
    await serve(c, runRoute('list', '', query))
    return (await c.got)?.body
  }
  const next = cursor('queued', base + 2, 'q2')
  t.equal(await page('status=queued&limit=2'), `{"runs":[${queuedJson('q4', base + 4)},${queuedJson('q2', base + 2)}],"next_cursor":"${next}"}`)
  t.equal(await page(`cursor=${next}&limit=2`), `{"runs":[${queuedJson('q1', base + 1)}],"next_cursor":null}`, 'the canceled and succeeded runs are passed over')
  t.equal(await page('status=succeeded'), `{"runs":[${succeededJson('f0', base, null)}],"next_cursor":null}`)
  const canceled = (await store.records.get(SCOPE, 'c3')).record
  t.equal(await page('status=canceled,succeeded&limit=1'),
    `{"runs":[{"run_id":"c3","status":"canceled","created_at":"${canceled.created_at}","completed_at":"${canceled.completed_at as string}","error":{"message":"run canceled"}}],` +
    `"next_cursor":"${cursor('succeeded,canceled', base + 3, 'c3')}"}`, 'the cursor writes the filter in the statuses\' order')
})

t.test('HEAD: the list\'s headers, no body', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  await queuedRun(store, 'r1', base)
  const c = await call({ method: 'HEAD', path: LIST })
  await listing(store).serve(c, runRoute('list'))
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, '')
  t.equal(got?.headers['content-length'], String(`{"runs":[${queuedJson('r1', base)}],"next_cursor":null}`.length))
})

t.test('a bad list query: 400, the store is not asked', async t => {
  const { serve } = listing(unreachableStore(memoryStore(t)))
  for (const [query, message] of [
    ['limit=0', 'limit must be a whole number from 1 to 1000'],
    ['status=done', 'status must be one or more of queued, running, succeeded, failed, canceled, separated by commas'],
    ['cursor=!!', 'malformed cursor'],
    [`status=queued&cursor=${cursor('', 1, 'r1')}`, 'cursor was made for another status filter']
  ] as const) {
    const c = await call({ method: 'GET', path: `${LIST}?${query}`, headers: { 'x-request-id': 'bad-list' } })
    const { error, got } = await refusal(c, serve(c, runRoute('list', '', query)))
    t.type(error, MalformedRequestError, query)
    t.equal(got?.status, 400, query)
    t.equal(got?.body, JSON.stringify({ message }), query)
    t.equal(got?.headers['x-request-id'], 'bad-list')
  }
})

t.test('a store that cannot be reached: 503 with Retry-After, for a list and a purge', async t => {
  const { serve, runsTotal } = listing(unreachableStore(memoryStore(t)))
  for (const [method, query] of [['GET', ''], ['DELETE', 'status=queued']] as const) {
    const c = await call({ method, path: `${LIST}?${query}` })
    const { error, got } = await refusal(c, serve(c, runRoute('list', '', query)))
    t.type(error, RunStoreUnavailableError, method)
    t.equal(got?.status, 503, method)
    t.equal(got?.headers['retry-after'], '1', method)
    t.equal(got?.body, '{"message":"run store unavailable"}', method)
  }
  t.same([...runsTotal.counts], [])
})

t.test('DELETE ?status=queued cancels every queued run of the app, and only those; each counted canceled', async t => {
  const store = memoryStore(t)
  const base = Date.now()
  const running = await runningRun(store, 'running', base)
  await finishedRun(store, 'done', base + 1)
  for (let i = 0; i < 3; i++) await queuedRun(store, `q${i}`, base + 2 + i)
  await queuedRun(store, 'elsewhere', base + 5, OTHER_SCOPE)
  const { serve, runsTotal } = listing(store)
  const c = await call({ method: 'DELETE', path: `${LIST}?status=queued`, headers: { 'x-request-id': 'purger' } })
  await serve(c, runRoute('list', '', 'status=queued'))
  const got = await c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, '{"canceled":3}')
  t.equal(got?.headers['x-request-id'], 'purger')
  t.equal(got?.headers['content-type'], 'application/json; charset=utf-8')
  t.same([...runsTotal.counts], [['canceled', 3]])
  const statuses = async (ids: string[]): Promise<string[]> => await Promise.all(ids.map(async id => (await store.records.get(SCOPE, id)).record.status))
  t.same(await statuses(['q0', 'q1', 'q2', 'running', 'done']), ['canceled', 'canceled', 'canceled', 'running', 'succeeded'])
  t.equal((await store.records.get(OTHER_SCOPE, 'elsewhere')).record.status, 'queued', 'another app\'s run waits on')
  t.equal(await store.queue.queuedCount(), 1, 'only the other app\'s run is left to take')
  t.equal(running.runId, 'running')

  const again = await call({ method: 'DELETE', path: `${LIST}?status=queued` })
  await serve(again, runRoute('list', '', 'status=queued'))
  t.equal((await again.got)?.body, '{"canceled":0}', 'nothing left: 0')
  t.same([...runsTotal.counts], [['canceled', 3]], 'and nothing more counted')
})

t.test('DELETE without status=queued: 400, nothing canceled', async t => {
  const store = memoryStore(t)
  await queuedRun(store, 'q0')
  const { serve, runsTotal } = listing(store)
  for (const query of ['', 'status=running', 'status=queued,failed', 'status=queued&status=canceled']) {
    const c = await call({ method: 'DELETE', path: `${LIST}?${query}` })
    const { error, got } = await refusal(c, serve(c, runRoute('list', '', query)))
    t.type(error, MalformedRequestError, query)
    t.equal(got?.status, 400, query)
    t.equal(got?.body, '{"message":"DELETE …/_runs needs status=queued: only queued runs are purged"}', query)
  }
  t.equal((await store.records.get(SCOPE, 'q0')).record.status, 'queued')
  t.same([...runsTotal.counts], [])
})

t.test('a caller that left while the store answered gets nothing; a purge still counts what it canceled', async t => {
  const store = memoryStore(t)
  await queuedRun(store, 'q0')
  const listed = held<void>()
  const purged = held<void>()
  const slow = storeWith(store, {
    listing: {
      list: async (scope, request) => { await listed.promise; return await store.listing.list(scope, request) },
      cancelQueued: async scope => { await purged.promise; return await store.listing.cancelQueued(scope) }
    }
  })
  const { serve, runsTotal } = listing(slow)
  for (const [method, query, release] of [['GET', '', listed.resolve], ['DELETE', 'status=queued', purged.resolve]] as const) {
    const c = await call({ method, path: `${LIST}?${query}` })
    const serving = serve(c, runRoute('list', '', query))
    const closed = new Promise(resolve => c.res.once('close', resolve))
    c.leave()
    await closed
    release()
    await serving
    t.equal(await c.got, undefined, `${method}: the caller's connection was cut, nothing written`)
    t.equal(c.res.headersSent, false, method)
  }
  t.same([...runsTotal.counts], [['canceled', 1]])
  t.equal((await store.records.get(SCOPE, 'q0')).record.status, 'canceled')
})
