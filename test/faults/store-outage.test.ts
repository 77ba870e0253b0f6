import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { scrape } from '../helpers/admin-metrics.ts'
import { send, type SentResponse } from '../helpers/http-client.ts'
import { eventually, type Harness, startHarness, startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'
import { patient, sleep } from '../helpers/timing.ts'
import { loadStoreConfig, type RunningBuildStore, startBuildStore } from '../../src/build-store/index.ts'
import { assertLeakFree, delta } from './fault-kit.ts'

// The central build store goes down and comes back (a real embedded store, restarted on the same
// port and DATA_DIR). While it is down: /v2 reads get 502, tokens verified before (and any token
// signed by a key already fetched) keep working, and the revocation list last fetched stays in
// force. Once it is back: /v2 reads succeed again and revocations reach the sidecar again.

const ADMIN_TOKEN = 'faults-admin-token-0123456789'
const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
const BUILD_PATH = '/v2/projects/proj/apps/app/builds/b1'

let dataDir: string
let port = 0
let store: RunningBuildStore | undefined
let app: TestServer
let h: Harness
const tokens: Record<'good' | 'doomed' | 'unused', { id: string, token: string }> = {} as never

async function startStore (): Promise<RunningBuildStore> {
  const running = await startBuildStore(loadStoreConfig({ PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, ADMIN_TOKEN, LOG_LEVEL: 'silent' }))
  port = running.port
  store = running
  return running
}

async function stopStore (): Promise<void> {
  const running = store
  store = undefined
  await running?.close()
}

async function createAccount (name: string): Promise<{ id: string, token: string }> {
  const created = await send(`http://127.0.0.1:${port}/v2/projects/proj/service-accounts`, {
    method: 'POST', headers: ADMIN, body: JSON.stringify({ name, expiresAt: '2035-01-01T00:00:00Z' })
  })
  if (created.status !== 201) throw new Error(`service account: ${created.status} ${created.text}`)
  return created.json() as { id: string, token: string }
}

async function revoke (id: string): Promise<void> {
  const revoked = await send(`http://127.0.0.1:${port}/v2/projects/proj/service-accounts/${id}`, { method: 'DELETE', headers: ADMIN })
  if (revoked.status !== 204) throw new Error(`revoke: ${revoked.status} ${revoked.text}`)
}

const invoke = async (token: string, id = 'store-call', project = 'proj'): Promise<SentResponse> =>
  await send(`${h.base}/v4/${project}/app/run`, { headers: { authorization: `Bearer ${token}`, 'x-request-id': id } })
const readBuild = async (token: string, id = 'store-read'): Promise<SentResponse> =>
  await send(`${h.base}${BUILD_PATH}`, { headers: { authorization: `Bearer ${token}`, 'x-request-id': id } })
const REVOKED = { message: 'invalid token: revoked' }

t.before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'faults-store-'))
  await startStore()
  app = await startTestServer((_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"ran":true}') })
  h = await startHarness(app.url, {
    STORE_URL: `http://127.0.0.1:${port}`,
    AUTH_JWKS_URL: `http://127.0.0.1:${port}/.well-known/jwks.json`
  }, { revocationIntervalMs: 100 })
})
t.teardown(async () => {
  await h?.close()
  await app?.close()
  await stopStore()
  await rm(dataDir, { recursive: true, force: true })
})

t.test('store up: tokens work, a revocation reaches the sidecar, /v2 reads are forwarded', async t => {
  tokens.good = await createAccount('good')
  tokens.doomed = await createAccount('doomed')
  tokens.unused = await createAccount('unused')
  const put = await send(`http://127.0.0.1:${port}${BUILD_PATH}`, { method: 'PUT', headers: ADMIN, body: JSON.stringify({ status: 'success', runtime: 'cortex', port: 8192 }) })
  t.equal(put.status, 201)

  t.equal((await invoke(tokens.good.token)).status, 200)
  t.equal((await invoke(tokens.doomed.token)).status, 200, 'the doomed token works until revoked (and is now cached)')
  const read = await readBuild(tokens.good.token)
  t.equal(read.status, 200)
  t.match(read.json(), { id: 'b1', projectId: 'proj', modelId: 'app', status: 'success', port: 8192 })

  await revoke(tokens.doomed.id)
  await eventually(async () => (await invoke(tokens.doomed.token)).status === 401, 5000)
  t.same((await invoke(tokens.doomed.token)).json(), REVOKED, 'revoked within a few refreshes, although cached')
})

t.test('store down: /v2 gets 502, cached and known-key tokens keep working, the last revocation list stays in force', async t => {
  const before = await scrape(h)
  await stopStore()
  t.equal((await send(`http://127.0.0.1:${port}/healthz`).catch((error: NodeJS.ErrnoException) => ({ status: error.code }))).status, 'ECONNREFUSED', 'the store is really gone')

  const started = performance.now()
  const read = await readBuild(tokens.good.token, 'read-while-down')
  t.equal(read.status, 502)
  t.same(read.json(), { message: 'build store unreachable: connection refused' })
  t.equal(read.headers['x-request-id'], 'read-while-down')
  t.equal(read.headers['content-type'], 'application/json; charset=utf-8')
  // no time-out or retry on the way to the store: only a hang could exceed the scaled bound
  t.ok(performance.now() - started < patient(2000), 'at once, not after a retry or a time-out')

  // many failed refreshes later… (a failed refresh leaves no log line or metric to wait for: only time)
  await sleep(600)
  for (let round = 0; round < 3; round++) {
    const [good, unused, doomed, other] = await Promise.all([
      invoke(tokens.good.token, `good-${round}`),
      invoke(tokens.unused.token, `unused-${round}`),
      invoke(tokens.doomed.token, `doomed-${round}`),
      invoke(tokens.good.token, `other-${round}`, 'other-project')
    ])
    t.equal(good.status, 200, `round ${round}: a cached token keeps working`)
    t.same((good.json() as { result: unknown }).result, { ran: true })
    t.equal(unused.status, 200, `round ${round}: a token never seen before works too (its key was fetched before the outage)`)
    t.equal(doomed.status, 401, `round ${round}: the revoked token stays refused`)
    t.same(doomed.json(), REVOKED)
    t.equal(other.status, 403, `round ${round}: another project's call stays 403`)
    await sleep(200) // pacing: refreshes (every 100 ms) keep failing between rounds
  }
  const foreign = await invoke(await h.token('proj'), 'unknown-key')
  t.equal(foreign.status, 502, 'a token with a key the sidecar never saw: the keys cannot be refetched, so 502 (not 401)')
  t.same(foreign.json(), { message: 'build store unreachable: token keys could not be fetched' })

  t.equal((await send(`${h.admin}/readyz`)).status, 200, 'the store being down does not make the replica unready')
  t.same(delta(before, await scrape(h), 'sidecar_requests_total'), {
    'sidecar_requests_total{route="management",code="502"}': 1,
    'sidecar_requests_total{route="invoke",code="200"}': 6,
    'sidecar_requests_total{route="invoke",code="401"}': 3,
    'sidecar_requests_total{route="invoke",code="403"}': 3,
    'sidecar_requests_total{route="invoke",code="502"}': 1
  })
  await assertLeakFree(t, h, 'store down')
})

t.test('store back on the same port: /v2 reads succeed again, the revocation still holds, new revocations arrive', async t => {
  await startStore()
  await eventually(async () => (await readBuild(tokens.good.token)).status === 200, 5000)
  const read = await readBuild(tokens.good.token, 'read-when-back')
  t.equal(read.status, 200)
  t.equal(read.headers['x-request-id'], 'read-when-back')
  t.match(read.json(), { id: 'b1', projectId: 'proj', status: 'success' }, 'the same data (same DATA_DIR)')
  t.same((await invoke(tokens.doomed.token)).json(), REVOKED, 'still revoked')

  const late = await createAccount('after-the-outage')
  t.equal((await invoke(late.token)).status, 200, 'a token issued after the restart works (same signing key)')
  await revoke(late.id)
  const revokedAt = performance.now()
  await eventually(async () => (await invoke(late.token)).status === 401, 5000)
  // refreshes every 100 ms (the harness): patient(2000) = 8 s still excludes falling back to the default 10 s
  t.ok(performance.now() - revokedAt < patient(2000), 'the sidecar fetches the revocation list again, at its interval')
  t.same((await invoke(late.token)).json(), REVOKED)
  t.equal((await invoke(tokens.good.token)).status, 200)
  await assertLeakFree(t, h, 'store back')
})
