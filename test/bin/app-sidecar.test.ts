import { readFileSync } from 'node:fs'
import { request } from 'node:http'
import { connect } from 'node:net'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { createTokenIssuer, serveJwks } from '../helpers/demo-token-issuer.ts'
import { type Child, runBin } from '../helpers/child-process.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, freePort, startTestServer } from '../helpers/sidecar-harness.ts'
import { startSidecarProcess } from '../helpers/sidecar-process.ts'
import { patient, sleep } from '../helpers/timing.ts'

const BASE_ENV = { PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1' }
/** A preload that holds the logger's batch timer (see the file). */
const NO_LOG_BATCH_TIMER = fileURLToPath(new URL('../helpers/fixtures/no-log-batch-timer.mjs', import.meta.url))

t.test('--help lists the variables and exits 0', async t => {
  const child = runBin('app-sidecar', {}, ['--help'])
  t.equal(await child.exited, 0)
  t.match(child.stdout, /^app-sidecar: /)
  for (const name of ['PORT', 'ADMIN_PORT', 'APP_URL', 'STORE_URL', 'DISABLE_AUTH', 'WEBHOOK_ALLOWED_CIDRS', 'LOG_LEVEL']) {
    t.match(child.stdout, new RegExp(`^  ${name} `, 'm'))
  }
})

t.test('--version prints the package version and exits 0, without starting', async t => {
  const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
  // the four processes start together, each checked in turn
  const bins = ['app-sidecar', 'build-store'].map(bin => ({
    bin,
    child: runBin(bin, { PORT: 'eighty' }, ['--version']), // an invalid PORT: it would exit 2 had it started
    help: runBin(bin, {}, ['--help'])
  }))
  for (const { bin, child, help } of bins) {
    t.equal(await child.exited, 0, bin)
    t.equal(child.stdout, `${version}\n`, bin)
    t.equal(child.stderr, '', bin)
    t.equal(await help.exited, 0)
    t.match(help.stdout, new RegExp(`^ *(Usage: )?${bin} .*--help \\| --version`, 'm'), `${bin} --help names --version`)
  }
})

t.test('an invalid value stops start-up with one line naming the variable', async t => {
  const cases: Array<[string, string]> = [['PORT', 'eighty'], ['APP_URL', 'ftp://app'], ['RUNTIME', 'python'], ['WEBHOOK_ALLOWED_CIDRS', '10.0.0.0/40'], ['APP_CANCEL_PATH', 'predictions/{run_id}/cancel']]
  const children = cases.map(([name, value]) => runBin('app-sidecar', { [name]: value }))
  for (const [i, [name]] of cases.entries()) {
    const child = children[i] as Child
    t.equal(await child.exited, 2, name)
    const lines = child.stderr.trim().split('\n')
    t.equal(lines.length, 1, 'one line')
    t.match(lines[0], new RegExp(`^app-sidecar: invalid configuration: ${name}: `))
    t.equal(child.stdout, '')
  }
})

t.test('a shared run store without PROJECT_ID and APP_NAME: start refused, exit 2, one line naming both', async t => {
  const scopes: Array<Record<string, string>> = [{}, { PROJECT_ID: 'p' }, { APP_NAME: 'a' }]
  const children = scopes.map(scope => runBin('app-sidecar', { ...BASE_ENV, DISABLE_AUTH: 'true', RUN_STORE_URL: 'redis://127.0.0.1:1/0', ...scope }))
  for (const [i, scope] of scopes.entries()) {
    const child = children[i] as Child
    t.equal(await child.exited, 2, JSON.stringify(scope))
    const lines = child.stderr.trim().split('\n')
    t.equal(lines.length, 1, 'one line')
    t.match(lines[0], /^app-sidecar: invalid configuration: RUN_STORE_URL: needs PROJECT_ID and APP_NAME too/)
    t.equal(child.stdout, '', 'nothing started')
  }
})

t.test('the start-up line naming the ports is written as soon as the listeners are open, not with the next batch', async t => {
  const app = await startTestServer((req, res) => { res.end() })
  t.teardown(() => app.close())
  const adminPort = await freePort()
  // the logger's batch timer (250 ms) is held: a line that arrives was flushed by the start-up code itself
  const child = runBin('app-sidecar', { ...BASE_ENV, ADMIN_PORT: String(adminPort), APP_URL: app.url, DISABLE_AUTH: 'true', NODE_OPTIONS: `--import=${NO_LOG_BATCH_TIMER}` })
  t.teardown(() => { child.process.kill('SIGKILL') })
  // the admin listener opens last, right before the line is logged
  while (!(await accepts(adminPort))) await sleep(2)
  const line = await child.waitForLine(line => line.msg === 'sidecar listening', 30_000)
  t.equal(line.adminPort, adminPort)
  t.type(line.port, 'number')
  t.equal(child.stderr, 'no-log-batch-timer: held the 250 ms interval\n', 'the line came with the batch timer held: not with the next batch')
})

t.test('a port in use: exit 1 and one line naming the variable to set, PORT or ADMIN_PORT', async t => {
  const busy = await startTestServer((req, res) => { res.end() })
  t.teardown(() => busy.close())
  const publicTaken = runBin('app-sidecar', { ...BASE_ENV, DISABLE_AUTH: 'true', PORT: String(busy.port) })
  t.equal(await publicTaken.exited, 1)
  t.equal(publicTaken.stderr, `app-sidecar: cannot start: EADDRINUSE listen EADDRINUSE: address already in use 127.0.0.1:${busy.port} ` +
    `(port ${busy.port} is taken: set PORT to another port, or PORT=0 for a free one)\n`)
  t.equal(publicTaken.stdout, '', 'nothing else')
  const adminTaken = runBin('app-sidecar', { ...BASE_ENV, DISABLE_AUTH: 'true', ADMIN_PORT: String(busy.port) })
  t.equal(await adminTaken.exited, 1)
  t.equal(adminTaken.stderr, `app-sidecar: cannot start: EADDRINUSE listen EADDRINUSE: address already in use 127.0.0.1:${busy.port} ` +
    `(port ${busy.port} is taken: set ADMIN_PORT to another port, or ADMIN_PORT=0 for a free one)\n`)
  t.equal(adminTaken.stdout, '')
})

t.test('SIGTERM: readyz turns 503 at once, in-flight and new calls finish, then exit 0', async t => {
  const held: Array<() => void> = []
  const app = await startTestServer((req, res) => {
    if (req.url === '/slow') held.push(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"slow":true}'))
    else res.writeHead(200, { 'content-type': 'application/json' }).end('{"fast":true}')
  })
  const issuer = await createTokenIssuer()
  const jwks = await serveJwks([issuer])
  t.teardown(async () => { await app.close(); await jwks.close() })
  const { child, base, admin } = await startSidecarProcess(t, { APP_URL: app.url, AUTH_JWKS_URL: jwks.url.href, RESPONSE_GRACE_PERIOD_SECONDS: '30' })
  const token = await issuer.sign('proj')
  const secret = 'whsec_never_logged'

  const slow = send(`${base}/v4/proj/app/slow`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'x-webhook-secret': secret }, body: '{}' })
  await eventually(() => held.length === 1)
  child.process.kill('SIGTERM')
  await child.waitForLine(line => line.msg === 'draining')
  t.equal((await send(`${admin}/readyz`)).status, 503, 'not ready while draining')
  const during = await send(`${base}/v4/proj/app/fast`, { headers: { authorization: `Bearer ${token}` } })
  t.equal(during.status, 200, 'new calls are still served while draining')
  t.equal(child.process.exitCode, null, 'still running while a call is in flight')
  held[0]?.()
  const slowResponse = await slow
  t.equal(slowResponse.status, 200)
  t.same((slowResponse.json() as { result: unknown }).result, { slow: true })
  t.equal(await child.exited, 0)
  t.ok(child.lines.some(line => line.msg === 'stopped' && line.clean === true))
  const requestLines = child.lines.filter(line => line.msg === 'request')
  t.equal(requestLines.length, 2, 'one line per request')
  t.notOk(child.stdout.includes(token) || child.stdout.includes(secret), 'no token or secret in the logs')
  t.notOk(child.stderr.includes(token) || child.stderr.includes(secret))
})

t.test('SIGTERM with nothing in flight exits 0 at once', async t => {
  const { child } = await startSidecarProcess(t, { DISABLE_AUTH: 'true' }, { ready: false })
  const sentAt = Date.now()
  child.process.kill('SIGTERM')
  t.equal(await child.exited, 0)
  // the 500 ms quiet period only; patient(3000) = 12 s is far short of the 900 s default grace period
  t.ok(Date.now() - sentAt < patient(3000), 'no fixed sleep, no waiting out the grace period')
})

t.test('the grace period ends what is left, and the process still exits 0', async t => {
  const app = await startTestServer(() => { /* never answers */ })
  t.teardown(() => app.close())
  const { child, base } = await startSidecarProcess(t, { APP_URL: app.url, DISABLE_AUTH: 'true', RESPONSE_GRACE_PERIOD_SECONDS: '0.5' })
  const outcome = new Promise<string>(resolve => {
    const req = request(`${base}/v4/p/a/hang`, { agent: false }, res => { resolve(`status ${res.statusCode}`) })
    req.on('error', error => { resolve((error as NodeJS.ErrnoException).code ?? 'error') })
    req.end()
  })
  await eventually(() => app.requests.length === 1)
  child.process.kill('SIGTERM')
  t.equal(await child.exited, 0)
  t.equal(await outcome, 'ECONNRESET', 'the caller sees the connection cut')
  t.ok(child.lines.some(line => line.msg === 'stopped' && line.clean === false))
})

/** True when something accepts a TCP connection on loopback `port`. */
async function accepts (port: number): Promise<boolean> {
  return await new Promise(resolve => {
    const socket = connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => { resolve(false) })
  })
}
