import t from 'tap'
import { metric } from '../helpers/admin-metrics.ts'
import { built, runNode } from '../helpers/child-process.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, startTestServer } from '../helpers/sidecar-harness.ts'

// docs/metrics.md, "Process": no input may stop the process. The bin guards it: an exception
// nobody caught, or a rejection nobody handled, is logged once with its stack, counted in
// sidecar_internal_errors_total, and the sidecar goes on serving.

// the real bin, started as `app-sidecar` starts it; once it listens, the process throws from a
// timer and leaves a rejection unhandled, as a bug in any background path would
const SCRIPT = `await import('./${built('src/bin/app-sidecar.ts')}')
setTimeout(() => { throw new Error('boom in a timer') }, 10)
void Promise.reject(new Error('boom in a promise'))`

t.test('an uncaught exception and an unhandled rejection: each logged once with its stack and counted; the sidecar serves on', async t => {
  const app = await startTestServer((_req, res) => { res.writeHead(200, { 'content-type': 'text/plain' }).end('still here') })
  t.teardown(() => app.close())
  const child = runNode(['--input-type=module', '-e', SCRIPT], {
    PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', APP_URL: app.url, DISABLE_AUTH: 'true', RUNTIME: 'custom'
  })
  t.teardown(() => { child.process.kill('SIGKILL') })
  const started = await child.waitForLine(line => line.msg === 'sidecar listening', 15_000)
  const base = `http://127.0.0.1:${started.port as number}`
  const admin = `http://127.0.0.1:${started.adminPort as number}`
  await child.waitForLine(line => line.msg === 'internal error' && line.origin === 'uncaughtException')
  await child.waitForLine(line => line.msg === 'internal error' && line.origin === 'unhandledRejection')
  const reported = child.lines.filter(line => line.msg === 'internal error')
  t.equal(reported.length, 2, 'each logged once')
  for (const [line, message] of [[reported.find(l => l.origin === 'uncaughtException'), 'boom in a timer'], [reported.find(l => l.origin === 'unhandledRejection'), 'boom in a promise']] as const) {
    t.equal(line?.level, 50, message)
    t.match((line?.err as { stack?: string } | undefined)?.stack, new RegExp(`^Error: ${message}\\n {4}at `), `${message}: with its stack`)
  }
  t.equal(child.process.exitCode, null, 'the process lives')
  await eventually(async () => (await send(`${admin}/readyz`)).status === 200)
  t.equal(await metric({ admin }, 'sidecar_internal_errors_total'), 2)
  const call = await send(`${base}/v4/p/a/x`)
  t.equal(call.status, 200)
  t.equal(call.text, 'still here', 'it serves on')
})
