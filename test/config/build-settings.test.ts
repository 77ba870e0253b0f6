import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { applyBuildSettings } from '../../src/config/build-settings.ts'
import { loadSidecarConfig } from '../../src/config/sidecar-config.ts'
import { ConfigError } from '../../src/errors.ts'
import { loadStoreConfig, startBuildStore } from '../../src/build-store/index.ts'
import { startTestServer } from '../helpers/sidecar-harness.ts'

const BUILD = {
  id: 'b1', projectId: 'p1', modelId: 'app-1', name: 'hello', port: 9123, runtime: 'custom', disableAuth: true,
  replicaConcurrency: 4, healthcheckEndpoint: '/health', readycheckEndpoint: '/ready', deadlineSeconds: 30,
  responseGracePeriodSeconds: 60, deploymentInitializationTimeout: 120, hardware: 'CPU'
}

t.test('without BUILD_ID nothing is fetched', async t => {
  const config = loadSidecarConfig({})
  t.equal(await applyBuildSettings(config, {}), config)
})

t.test('BUILD_ID needs PROJECT_ID and APP_ID', async t => {
  t.throws(() => loadSidecarConfig({ BUILD_ID: 'b1', PROJECT_ID: 'p1' }), { message: 'BUILD_ID: needs PROJECT_ID and APP_ID too' })
})

t.test('the build fills in every app setting the environment left unset; explicit variables win', async t => {
  const store = await startTestServer((req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(BUILD)) })
  t.teardown(() => store.close())
  const env = { STORE_URL: store.url, BUILD_ID: 'b1', PROJECT_ID: 'p1', APP_ID: 'app-1', STORE_TOKEN: 'sa-token.abc', DEADLINE_SECONDS: '5' }
  const config = await applyBuildSettings(loadSidecarConfig(env), env)
  t.equal(store.requests[0]?.url, '/v2/projects/p1/apps/app-1/builds/b1')
  t.equal(store.requests[0]?.headers.authorization, 'Bearer sa-token.abc')
  t.equal(config.appUrl.href, 'http://127.0.0.1:9123/')
  t.equal(config.appName, 'hello')
  t.equal(config.runtime, 'custom')
  t.equal(config.disableAuth, true)
  t.equal(config.replicaConcurrency, 4)
  t.equal(config.queueDepth, 40, 'derived defaults follow the build')
  t.equal(config.healthcheckPath, '/health')
  t.equal(config.readycheckPath, '/ready')
  t.equal(config.deadlineSeconds, 5, 'the explicit DEADLINE_SECONDS wins over the build')
  t.equal(config.responseGracePeriodSeconds, 60)
  t.equal(config.appReadyTimeoutSeconds, 120, 'deploymentInitializationTimeout bounds the wait for first readiness')
})

t.test('computeTier: interruptible makes RUN_MAX_ATTEMPTS 3 unless the environment sets it; protected leaves the default', async t => {
  let build: Record<string, unknown> = { computeTier: 'interruptible' }
  const store = await startTestServer((req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(build)) })
  t.teardown(() => store.close())
  const env = { STORE_URL: store.url, BUILD_ID: 'b1', PROJECT_ID: 'p1', APP_ID: 'app-1' }
  t.equal((await applyBuildSettings(loadSidecarConfig(env), env)).runMaxAttempts, 3)
  const explicit = { ...env, RUN_MAX_ATTEMPTS: '1' }
  t.equal((await applyBuildSettings(loadSidecarConfig(explicit), explicit)).runMaxAttempts, 1, 'the explicit variable wins')
  build = { computeTier: 'protected' }
  t.equal((await applyBuildSettings(loadSidecarConfig(env), env)).runMaxAttempts, 1)
})

t.test('a store that is down at first is retried with back-off', async t => {
  let calls = 0
  const store = await startTestServer((req, res) => {
    calls++
    if (calls < 3) res.writeHead(503).end('warming up')
    else res.writeHead(200).end(JSON.stringify({ port: 9999 }))
  })
  t.teardown(() => store.close())
  const env = { STORE_URL: store.url, BUILD_ID: 'b1', PROJECT_ID: 'p1', APP_ID: 'a1' }
  const config = await applyBuildSettings(loadSidecarConfig(env), env, { minDelayMs: 10 })
  t.equal(calls, 3)
  t.equal(config.appUrl.port, '9999')
})

t.test('unreachable after every attempt: one clear error naming BUILD_ID', async t => {
  const store = await startTestServer((req, res) => { res.end() })
  await store.close()
  const env = { STORE_URL: store.url, BUILD_ID: 'b1', PROJECT_ID: 'p1', APP_ID: 'a1' }
  let caught: unknown
  try { await applyBuildSettings(loadSidecarConfig(env), env, { attempts: 3, minDelayMs: 10 }) } catch (error) { caught = error }
  t.type(caught, ConfigError)
  t.match((caught as Error).message, /^BUILD_ID: cannot read build b1 from http:\/\/127\.0\.0\.1:\d+: store unreachable \(ECONNREFUSED\)$/)
})

t.test('a 4xx answer is final at once; a build with an invalid setting is refused', async t => {
  let calls = 0
  let answer = { status: 404, body: '{"message":"no such build"}' }
  const store = await startTestServer((req, res) => { calls++; res.writeHead(answer.status).end(answer.body) })
  t.teardown(() => store.close())
  const env = { STORE_URL: store.url, BUILD_ID: 'b1', PROJECT_ID: 'p1', APP_ID: 'a1', STORE_TOKEN: 'secret-token' }
  await t.rejects(applyBuildSettings(loadSidecarConfig(env), env, { minDelayMs: 10 }), { message: 'BUILD_ID: cannot read build b1 from ' + store.url + ': store answered 404 {"message":"no such build"}' })
  t.equal(calls, 1, 'no retry for a 4xx')
  answer = { status: 200, body: JSON.stringify({ runtime: 'python' }) }
  await t.rejects(applyBuildSettings(loadSidecarConfig(env), env), { message: 'BUILD_ID: build b1 sets RUNTIME: expected one of cortex, custom, got "python"' })
})

t.test('against the real build store (embedded)', async t => {
  // a directory of our own, removed after the store closed (tap's testdir may be removed while PGlite still flushes)
  const dataDir = mkdtempSync(join(tmpdir(), 'build-settings-'))
  const store = await startBuildStore(loadStoreConfig({ PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ADMIN_TOKEN: 'admin-token-0123456789', LOG_LEVEL: 'silent' }))
  t.teardown(async () => {
    await store.close()
    rmSync(dataDir, { recursive: true, force: true, maxRetries: 5 })
  })
  await store.builds.put({ projectId: 'p1', appId: 'app-1', buildId: 'b1' }, { name: 'hello', port: 9124, runtime: 'cortex', replicaConcurrency: 2 })
  const { token } = await store.serviceAccounts.create('p1', 'sidecar', new Date(Date.now() + 3_600_000))
  const env = { STORE_URL: store.url, BUILD_ID: 'b1', PROJECT_ID: 'p1', APP_ID: 'app-1', STORE_TOKEN: token }
  const config = await applyBuildSettings(loadSidecarConfig(env), env)
  t.equal(config.appUrl.href, 'http://127.0.0.1:9124/')
  t.equal(config.replicaConcurrency, 2)
  t.equal(config.appName, 'hello')
  const noToken = { ...env, STORE_TOKEN: '' }
  await t.rejects(applyBuildSettings(loadSidecarConfig(noToken), noToken), { message: /store answered 401/ })
})
