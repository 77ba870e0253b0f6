import t, { type Test } from 'tap'
import { send } from '../../helpers/http-client.ts'
import { privateRunStore } from '../../helpers/redis-server.ts'
import { runsAppFor, runsClient } from '../../helpers/runs-client.ts'
import { eventually, type Harness, sidecarFor } from '../../helpers/sidecar-harness.ts'

// docs/console.md, "Runs": the console's runs list is the page `GET …/_runs` answers, each run
// with its caller (the token's `sub`, or the address; null when the store kept none) and its
// urgency too; the public listing keeps its shape. In memory, and across two sidecars sharing a Redis.

const TOKEN = 'console-token-0123456789'
const BEARER = { authorization: `Bearer ${TOKEN}` }
const APP = { PROJECT_ID: 'p', APP_NAME: 'a', CONSOLE_TOKEN: TOKEN }

type Backend = 'memory' | 'redis'
const BACKENDS: readonly Backend[] = ['memory', 'redis']

interface Page { runs: Array<Record<string, unknown>>, next_cursor: string | null }

/** The sidecar runs are submitted to, and the one whose console reads them (the same one in memory). */
async function sidecarsOf (t: Test, backend: Backend, appUrl: string, env: Record<string, string> = {}): Promise<{ submitTo: Harness, console: Harness }> {
  if (backend === 'memory') {
    const h = await sidecarFor(t, appUrl, { ...APP, ...env })
    return { submitTo: h, console: h }
  }
  const redis = await privateRunStore(t)
  const common = { ...APP, ...redis.env, ...env }
  return { submitTo: await sidecarFor(t, appUrl, common), console: await sidecarFor(t, appUrl, common) }
}

t.test('without CONSOLE_TOKEN the list is 404; without the cookie or bearer, or with a wrong one, 401; only GET and HEAD', async t => {
  const app = await runsAppFor(t)
  const plain = await sidecarFor(t, app.url, { PROJECT_ID: 'p', APP_NAME: 'a', DISABLE_AUTH: 'true' })
  for (const query of ['', '?status=queued&limit=5']) {
    const r = await send(`${plain.admin}/console/api/runs${query}`, { headers: BEARER })
    t.equal(r.status, 404, `no console: ${query}`)
    t.same(r.json(), { message: 'no such route' })
  }
  const h = await sidecarFor(t, app.url, { ...APP, DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1' })
  for (const headers of [{}, { authorization: 'Bearer console-token-wrong-0000' }, { cookie: 'sidecar_console=forged' }]) {
    const r = await send(`${h.admin}/console/api/runs`, { headers })
    t.equal(r.status, 401, JSON.stringify(headers))
    t.notMatch(r.text, /"runs"/)
  }
  const login = await send(`${h.admin}/console/login`, { method: 'POST', headers: { origin: h.admin }, body: `token=${TOKEN}` })
  const cookie = ((login.headers['set-cookie'] ?? [])[0] as string).split(';')[0] as string
  t.same((await send(`${h.admin}/console/api/runs`, { headers: { cookie } })).json(), { runs: [], next_cursor: null }, 'the login\'s cookie')
  t.equal((await send(`${h.admin}/console/api/runs`, { method: 'HEAD', headers: BEARER })).status, 200)
  t.same((await send(`${h.admin}/console/api/runs?limit=0`, { headers: BEARER })).json(), { message: 'limit must be a whole number from 1 to 1000' }, 'the listing\'s own errors')

  // the list changes nothing: a DELETE is no purge here (Purge is the POST, from the console's origin)
  const client = runsClient({ base: h.base, project: 'p', app: 'a' })
  t.equal((await client.submit('/hold/first', 'first')).status, 202)
  await app.waitForHeld(1)
  t.equal((await client.submit('/json/second', 'second')).status, 202)
  for (const method of ['DELETE', 'POST']) {
    const r = await send(`${h.admin}/console/api/runs?status=queued`, { method, headers: { ...BEARER, origin: h.admin } })
    t.equal(r.status, 405, method)
    t.equal(r.headers.allow, 'GET, HEAD')
  }
  t.equal((await client.read('second')).record.status, 'queued', 'nothing was canceled')
  app.held[0]?.res.end('{}')
})

for (const backend of BACKENDS) {
  t.test(`${backend}: each run with its caller and urgency, exactly; the public listing as it was`, async t => {
    const app = await runsAppFor(t)
    const { submitTo, console } = await sidecarsOf(t, backend, app.url, { REPLICA_CONCURRENCY: '1' })
    const x = runsClient({ base: submitTo.base, project: 'p', app: 'a', token: await submitTo.issuer.sign('p', { claims: { sub: 'operator-x' } }) })
    const bob = runsClient({ base: submitTo.base, project: 'p', app: 'a', token: await submitTo.issuer.sign('p', { claims: { sub: 'bob' } }) })
    t.equal((await x.submit('/json/urgent', 'urgent-run', { headers: { priority: 'u=1' } })).status, 202)
    t.equal((await x.finished('urgent-run')).record.status, 'succeeded')
    t.equal((await bob.submit('/hold/plain', 'plain-run')).status, 202)
    await app.waitForHeld(1)
    t.equal((await bob.submit('/hold/later', 'queued-run', { headers: { priority: 'u=6' } })).status, 202)
    // two replicas: the other one runs it (held too); in memory it waits
    if (backend === 'redis') await app.waitForHeld(2)
    // a keyed sync call (waiting for a slot) is recorded too, without a caller or urgency of its own
    const keyed = x.call('/json/keyed', { headers: { 'idempotency-key': 'k-1', 'x-request-id': 'keyed-run', priority: 'u=0' }, body: '{}' })
    await eventually(async () => (await send(x.runUrl('keyed-run'), { headers: x.headers() })).status === 200)

    const list = await send(`${console.admin}/console/api/runs`, { headers: BEARER })
    t.equal(list.status, 200)
    t.equal(list.headers['content-type'], 'application/json; charset=utf-8')
    const page = list.json() as Page
    const publicPage = (await send(x.runUrl('').slice(0, -1), { headers: x.headers() })).json() as Page
    t.same(page.runs.map(run => run.run_id), ['keyed-run', 'queued-run', 'plain-run', 'urgent-run'], 'newest first')
    t.same(page.runs.map(run => [run.caller, run.urgency]), [[null, 3], ['bob', 6], ['bob', 3], ['operator-x', 1]])
    t.same(page.runs, publicPage.runs.map(run => ({ ...run, caller: page.runs.find(r => r.run_id === run.run_id)?.caller, urgency: page.runs.find(r => r.run_id === run.run_id)?.urgency })),
      'each the public listing\'s record, with the two fields')
    const urgent = page.runs[3] as Record<string, unknown>
    t.same(Object.keys(urgent), ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'caller', 'urgency'], 'exactly its fields')
    t.match(urgent, { run_id: 'urgent-run', status: 'succeeded', status_code: 200, caller: 'operator-x', urgency: 1 })
    for (const run of publicPage.runs) t.same([run.caller, run.urgency], [undefined, undefined], `the public listing has neither: ${run.run_id as string}`)

    // its paging and filter are the listing's
    const first = (await send(`${console.admin}/console/api/runs?limit=2&status=queued,running,succeeded`, { headers: BEARER })).json() as Page
    t.same(first.runs.map(run => [run.run_id, run.caller, run.urgency]), [['keyed-run', null, 3], ['queued-run', 'bob', 6]])
    const next = (await send(`${console.admin}/console/api/runs?limit=2&cursor=${first.next_cursor as string}`, { headers: BEARER })).json() as Page
    t.same(next.runs.map(run => [run.run_id, run.caller, run.urgency]), [['plain-run', 'bob', 3], ['urgent-run', 'operator-x', 1]])
    for (const held of app.held) held.res.end('{}')
    t.equal((await keyed).status, 200)
    if (backend === 'memory') (await app.waitForHeld(2)).res.end('{}')
    t.equal((await bob.finished('queued-run')).record.status, 'succeeded')
  })
}
