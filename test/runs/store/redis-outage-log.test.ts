import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { Redis } from 'ioredis'
import t from 'tap'
import { metric } from '../../helpers/admin-metrics.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'
import { runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { eventually, freePort, type LogLine } from '../../helpers/sidecar-harness.ts'
import { reapOnExit } from '../../helpers/child-reaper.ts'

// docs/operations.md, "When the run store is unreachable": an outage of the run store, at start
// or later, is logged once in plain words naming RUN_STORE_URL without its password, and once
// when it is back; a database number the server does not have is refused, never replaced.

const outages = (logs: LogLine[]): LogLine[] => logs.filter(line => String(line.msg).startsWith('run store unreachable'))
const recoveries = (logs: LogLine[]): LogLine[] => logs.filter(line => String(line.msg).startsWith('run store reachable'))
const UNAVAILABLE = '{"message":"run store unavailable"}'

t.test('a Redis down at start: logged once in plain words (no password), 503s with a plain reason; once it is up, logged back once', async t => {
  const port = await freePort()
  const url = `redis://:s3cret-pw@127.0.0.1:${port}/0`
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUN_STORE_URL: url, PROJECT_ID: 'p', APP_NAME: 'a' })
  await eventually(() => outages(h.logs).length === 1)
  const [down] = outages(h.logs)
  t.equal(down?.level, 40, 'a warning')
  t.equal(down?.msg, `run store unreachable at RUN_STORE_URL redis://127.0.0.1:${port}/0: connection refused; async runs and run records answer 503 until it is back`)
  t.equal(down?.reason, 'connection refused')
  t.equal(down?.runStore, `redis://127.0.0.1:${port}/0`)

  const client = runsClient({ base: h.base })
  const refused = await client.submit('/json', 'down-1', { body: '{}' })
  t.equal(refused.status, 503)
  t.equal(refused.text, UNAVAILABLE)
  const line = h.logs.find(l => l.runId === 'down-1' && l.msg === 'request')
  t.equal(line?.reason, 'run store unavailable: not connected', 'the access line says why in plain words, not the client library\'s')
  t.notOk(JSON.stringify(h.logs).includes('s3cret-pw'), 'the password is in no line')
  t.notOk(JSON.stringify(h.logs).includes('enableOfflineQueue'), 'nor the client library\'s wording')

  // the probe goes on: still one line for the outage
  await new Promise(resolve => setTimeout(resolve, 1500))
  t.equal(outages(h.logs).length, 1, 'once per outage, however often it is probed')

  const server = reapOnExit(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--requirepass', 's3cret-pw'], { stdio: 'ignore' }))
  t.teardown(async () => {
    if (server.exitCode !== null) return
    server.kill('SIGKILL')
    await once(server, 'exit')
  })
  await eventually(() => recoveries(h.logs).length === 1, 10_000)
  t.equal(recoveries(h.logs)[0]?.msg, `run store reachable at RUN_STORE_URL redis://127.0.0.1:${port}/0`)
  const accepted = await client.submit('/json', 'up-1', { body: '{}' })
  t.equal(accepted.status, 202)
  t.equal(outages(h.logs).length, 1)
})

t.test('a database number the server does not have: refused and logged naming it; nothing is written to database 0', async t => {
  const redis = await startPrivateRedis(t, ['--databases', '16'])
  const probe = new Redis(redis.url)
  t.teardown(() => { probe.disconnect() })
  const missing = redis.url.replace(/\/0$/, '/42')
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUN_STORE_URL: missing, PROJECT_ID: 'p', APP_NAME: 'a' })
  await eventually(() => outages(h.logs).length === 1)
  t.equal(outages(h.logs)[0]?.reason, 'the server has no database 42')
  t.match(String(outages(h.logs)[0]?.msg), /RUN_STORE_URL redis:\/\/127\.0\.0\.1:\d+\/42: the server has no database 42;/)

  const client = runsClient({ base: h.base })
  const refused = await client.submit('/json', 'db-1', { body: '{}' })
  t.equal(refused.status, 503, 'async runs are refused, not written elsewhere')
  t.equal((await client.call('/json', { body: '{}' })).status, 200, 'plain calls still work')
  t.equal(await metric(h, 'sidecar_run_store_up'), 0)
  // the probe runs on (every second): the store stays refused
  await new Promise(resolve => setTimeout(resolve, 1500))
  t.equal(await probe.dbsize(), 0, 'database 0 holds nothing of the sidecar\'s')
  t.equal(outages(h.logs).length, 1)
  t.equal(recoveries(h.logs).length, 0, 'never taken for up')
})
