import { createServer } from 'node:http'
import t from 'tap'
import { AppProbe } from '../../src/lifecycle/app-probe.ts'
import { refusedPort } from '../helpers/ports.ts'
import { eventually, startTestServer, freePort } from '../helpers/sidecar-harness.ts'


t.test('passed() waits for an app that starts late, probing every fast interval', async t => {
  const port = await freePort()
  const probe = new AppProbe({ appUrl: new URL(`http://127.0.0.1:${port}`), path: undefined, fastIntervalMs: 20, slowIntervalMs: 10_000 })
  probe.start()
  t.teardown(() => { probe.stop() })
  let passed = false
  const waiting = probe.passed().then(() => { passed = true })
  await eventually(() => probe.lastFailure === 'connection refused') // a probe was refused and taken in
  t.equal(passed, false, 'nothing listens yet')
  t.equal(probe.passing, false)
  const app = createServer((req, res) => { res.end() })
  await new Promise<void>(resolve => app.listen(port, '127.0.0.1', resolve))
  t.teardown(() => new Promise(resolve => app.close(resolve)))
  await waiting
  t.equal(probe.passing, true)
  await probe.passed()
  t.equal(probe.passing, true, 'passed() resolves at once once passing')
})

t.test('stop() releases whoever waits for a first pass', async t => {
  const port = await refusedPort()
  const probe = new AppProbe({ appUrl: new URL(`http://127.0.0.1:${port}/`), path: '/ready', fastIntervalMs: 20 })
  probe.start()
  const waiting = probe.passed()
  probe.stop()
  await waiting
  t.equal(probe.passing, false)
  await probe.passed()
  t.equal(probe.passing, false, 'a stopped probe does not hold anyone')
})

t.test('an HTTP check passes on 2xx/3xx, fails on 4xx/5xx and on a hung answer', async t => {
  let status = 302
  let hang = false
  const app = await startTestServer((req, res) => {
    if (hang) return
    res.writeHead(status).end()
  })
  t.teardown(() => app.close())
  const probe = new AppProbe({ appUrl: new URL(`${app.url}/base/`), path: '/ready', fastIntervalMs: 10, slowIntervalMs: 10, timeoutMs: 100 })
  probe.start()
  t.teardown(() => { probe.stop() })
  await eventually(() => probe.passing)
  t.equal(app.requests[0]?.url, '/base/ready', 'the APP_URL path prefix is kept')
  status = 500
  await eventually(() => !probe.passing)
  status = 204
  await eventually(() => probe.passing)
  hang = true
  await eventually(() => !probe.passing, 2000)
  t.equal(probe.passing, false, 'a probe that times out fails')
})
