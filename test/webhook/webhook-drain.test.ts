import { performance } from 'node:perf_hooks'
import t from 'tap'
import type { Child } from '../helpers/child-process.ts'
import { patient } from '../helpers/timing.ts'
import { startSidecarProcess } from '../helpers/sidecar-process.ts'
import { send } from '../helpers/http-client.ts'
import type { TestServer } from '../helpers/sidecar-harness.ts'
import { type ReceivedAttempt, type ReceiverAction, startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts'
import { invokePath, startWebhookApp } from './webhook-kit.ts'

// SIGTERM with deliveries pending, on the real bin in a child process.

let app: TestServer
t.before(async () => { app = await startWebhookApp() })
t.teardown(() => app.close())

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

async function start (t: Tap, script: ReceiverAction[], grace: string): Promise<{ child: Child, receiver: WebhookReceiver, base: string }> {
  const receiver = await startWebhookReceiver(script)
  t.teardown(() => receiver.close())
  const { child, base } = await startSidecarProcess(t, {
    APP_URL: app.url, DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', RESPONSE_GRACE_PERIOD_SECONDS: grace
  })
  return { child, receiver, base }
}

t.test('SIGTERM right after a call: the pending delivery completes, then the process exits 0', async t => {
  // a grace period far past patient(6000) = 24 s, which the exit below must come before
  const { child, receiver, base } = await start(t, [{ status: 200, delayMs: 1000 }], '60')
  const r = await send(base + invokePath('/json', `${receiver.url}/hook`), { method: 'POST', headers: { 'x-request-id': 'drain-ok' }, body: '{}' })
  t.equal(r.status, 200)
  const signalled = performance.now()
  child.process.kill('SIGTERM')
  const code = await child.exited
  const exitedAt = performance.now()
  t.equal(code, 0, `exit 0 (stderr: ${child.stderr})`)
  t.equal(receiver.attempts.length, 1, 'the receiver got it exactly once')
  const attempt = receiver.attempts[0] as ReceivedAttempt
  t.equal(attempt.headers['x-request-id'], 'drain-ok')
  t.type(attempt.endedAt, 'number', 'and answered it')
  t.ok((attempt.endedAt as number) <= exitedAt, 'before the process exited')
  t.ok(exitedAt - signalled >= 800, `the process waited for the delivery (${(exitedAt - signalled).toFixed(0)} ms)`)
  t.ok(exitedAt - signalled < patient(6000), 'but not for the whole grace period')
  t.equal(child.lines.filter(line => line.msg === 'webhook failed').length, 0)
  t.match(child.lines.find(line => line.msg === 'stopped'), { clean: true })
})

t.test('SIGTERM with deliveries that never finish: exit 0 after the grace period, one "shutdown" line per run id', async t => {
  const { child, receiver, base } = await start(t, ['hang'], '0.5')
  const ids = ['drain-a', 'drain-b']
  for (const id of ids) {
    const r = await send(base + invokePath('/json', `${receiver.url}/hook`), { method: 'POST', headers: { 'x-request-id': id }, body: '{}' })
    t.equal(r.status, 200)
  }
  await receiver.waitForAttempts(2)
  const signalled = performance.now()
  child.process.kill('SIGTERM')
  t.equal(await child.exited, 0, `exit 0 (stderr: ${child.stderr})`)
  const took = performance.now() - signalled
  // the deliveries never finish: only the grace period ends them, so the upper bound excludes a hang
  t.ok(took >= 400 && took < patient(5000), `exited after the grace period, not never (${took.toFixed(0)} ms)`)
  const failed = child.lines.filter(line => line.msg === 'webhook failed')
  t.equal(failed.length, 2, 'one line per pending delivery')
  for (const id of ids) {
    const lines = failed.filter(line => line.runId === id)
    t.equal(lines.length, 1, `${id}: exactly once`)
    t.match(lines[0], { runId: id, host: `127.0.0.1:${receiver.port}`, attempts: 1, outcome: 'shutdown' })
  }
  t.equal(receiver.attempts.length, 2, 'no retry after the shutdown')
  t.match(child.lines.find(line => line.msg === 'stopped'), { clean: false })
})
