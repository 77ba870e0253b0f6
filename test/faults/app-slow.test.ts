import { performance } from 'node:perf_hooks'
import type { Socket } from 'node:net'
import t from 'tap'
import { scrape } from '../helpers/admin-metrics.ts'
import { send, type SentResponse } from '../helpers/http-client.ts'
import { eventually, startHarness, startTestServer } from '../helpers/sidecar-harness.ts'
import { patient, sleep } from '../helpers/timing.ts'
import { startWebhookReceiver } from '../helpers/webhook-receiver.ts'
import { assertLeakFree, startFaultApp } from './fault-kit.ts'

// The app is slow: it accepts a connection and never answers, answers late, or (frozen with
// SIGSTOP, behind a listen backlog of 1) does not even accept. The caller waits, bounded by
// DEADLINE_SECONDS (504), or gets its answer late; nothing hangs; the sidecar serves other
// calls meanwhile; nothing is left behind.

const timed = async (promise: Promise<SentResponse>): Promise<SentResponse & { ms: number }> => {
  const started = performance.now()
  const response = await promise
  return Object.assign(response, { ms: performance.now() - started })
}

// long enough that the other calls (and the late answer) are all in before it on a loaded machine
const HANG_DEADLINE_S = 3

t.test('an app that accepts and never answers: 504 at the deadline, the app request is cut, other calls are served meanwhile', async t => {
  const hung = new Set<Socket>()
  let hungClosed = 0
  const app = await startTestServer((req, res) => {
    const path = (req.url as string).split('?', 1)[0]
    if (path === '/hang') {
      hung.add(req.socket)
      req.socket.once('close', () => { hungClosed++ })
      return // never answers
    }
    if (path === '/late') {
      setTimeout(() => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"late":true}') }, 600)
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"fast":true}')
  })
  t.teardown(() => app.close())
  const receiver = await startWebhookReceiver([], 200)
  t.teardown(() => receiver.close())
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', DEADLINE_SECONDS: String(HANG_DEADLINE_S), WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  t.teardown(() => h.close())
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)

  const hookQuery = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
  const stuck = Array.from({ length: 3 }, (_x, i) =>
    timed(send(`${h.base}/v4/proj/app/hang?${hookQuery}`, { headers: { 'x-request-id': `hang-${i}` } })))
  const late = timed(send(`${h.base}/v4/proj/app/late`, { headers: { 'x-request-id': 'late' } }))
  await eventually(() => hung.size === 3)
  t.equal((await scrape(h)).sidecar_inflight_requests, 4, 'all four calls are at the app (no concurrency limit)')

  // meanwhile, everything else is answered at once
  // meanwhile: each answer comes while the app still holds the three hung calls (none cut yet)
  const others = await Promise.all(Array.from({ length: 20 }, async (_x, i) => {
    const response = await send(`${h.base}/v4/proj/app/fast`, { headers: { 'x-request-id': `fast-${i}` } })
    return { status: response.status, hungClosed }
  }))
  t.same(others.map(r => r.status), Array(20).fill(200), '20 other calls answered while 3 hang')
  t.same(others.map(r => r.hungClosed), Array(20).fill(0), 'each before the deadline cut any hung call')
  t.equal((await send(`${h.admin}/livez`)).status, 200)
  t.equal((await send(`${h.base}/nowhere`)).status, 404)

  const lateAnswer = await late
  t.equal(lateAnswer.status, 200, 'an answer that comes late, but within the deadline, is delivered')
  t.ok(lateAnswer.ms >= 550, `late (${lateAnswer.ms.toFixed(0)} ms)`)
  t.same((lateAnswer.json() as { result: unknown }).result, { late: true })

  const answers = await Promise.all(stuck)
  for (const [i, answer] of answers.entries()) {
    t.equal(answer.status, 504, `hang-${i}: 504`)
    t.equal(answer.headers['x-request-id'], `hang-${i}`)
    t.same(answer.json(), { message: `request exceeded its deadline of ${HANG_DEADLINE_S}s` })
    // nothing but the deadline ends a hung call: the upper bound only excludes a hang
    t.ok(answer.ms >= HANG_DEADLINE_S * 1000 - 100 && answer.ms < patient(HANG_DEADLINE_S * 1000 + 1000), `hang-${i}: at the deadline, not never (${answer.ms.toFixed(0)} ms)`)
  }
  await eventually(() => hungClosed === 3, 3000)
  t.equal(hungClosed, 3, 'the sidecar closed every hung connection to the app')

  const attempts = await receiver.waitForAttempts(3)
  const bodies = attempts.map(a => JSON.parse(a.body.toString()) as { run_id: string, status_code: number, result: unknown })
  t.same(bodies.map(b => [b.run_id, b.status_code, b.result]).sort(),
    [0, 1, 2].map(i => [`hang-${i}`, 504, { message: `request exceeded its deadline of ${HANG_DEADLINE_S}s` }]), 'each webhook reports the 504')
  await assertLeakFree(t, h, 'after the deadline')
})

// long enough that the whole freeze below (six calls waiting, other routes, the resume) fits in it on a loaded machine
const FREEZE_DEADLINE_S = 6

t.test('a frozen app (SIGSTOP, listen backlog 1): callers wait and get their answers late, or 504 at the deadline; other routes are served meanwhile', async t => {
  const app = await startFaultApp(t, 0, { BACKLOG: '1' })
  t.teardown(() => { if (app.running()) app.child.process.kill('SIGCONT') })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', DEADLINE_SECONDS: String(FREEZE_DEADLINE_S) })
  t.teardown(() => h.close())
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)
  t.equal((await send(`${h.base}/v4/proj/app/json`)).status, 200, 'a warm-up call')

  await app.signal('SIGSTOP')
  let answered = 0
  const waiting = Array.from({ length: 6 }, async (_x, i) => {
    const answer = await timed(send(`${h.base}/v4/proj/app/json`, { headers: { 'x-request-id': `frozen-${i}` } }))
    answered++
    return answer
  })
  await eventually(async () => (await scrape(h)).sidecar_inflight_requests === 6)
  // only time shows the calls keep waiting (and 'late' below is measured against this freeze)
  await sleep(300)
  const during = await scrape(h)
  t.equal(during.sidecar_inflight_requests, 6, 'the six calls wait at the app')
  t.equal(during.sidecar_queued_requests, 0, 'none is queued in the sidecar (no concurrency limit)')
  t.equal((await send(`${h.admin}/livez`)).status, 200)
  t.equal((await send(`${h.base}/v4`)).status, 404)
  const management = await send(`${h.base}/v2/projects/p/apps/a/builds/b`)
  t.ok(management.status > 0 && management.status !== 502, `a /v2 read still reaches the store (${management.status})`)
  // at once: while the six calls still wait at the frozen app, not after them
  t.equal(answered, 0, 'other routes are answered while the frozen app holds every call')
  t.equal((await scrape(h)).sidecar_inflight_requests, 6)

  await app.signal('SIGCONT')
  const answers = await Promise.all(waiting)
  // 200, not 504: within the deadline, new connections included
  t.same(answers.map(a => a.status), Array(6).fill(200), 'once the app resumes, every waiting call gets its answer within the deadline')
  t.same(answers.map(a => a.headers['x-request-id']), [0, 1, 2, 3, 4, 5].map(i => `frozen-${i}`))
  t.ok(answers.every(a => a.ms >= 300), 'late: after the freeze')

  await app.signal('SIGSTOP')
  const stuck = await timed(send(`${h.base}/v4/proj/app/json`, { headers: { 'x-request-id': 'frozen-too-long' } }))
  t.equal(stuck.status, 504, 'frozen past the deadline: 504')
  t.same(stuck.json(), { message: `request exceeded its deadline of ${FREEZE_DEADLINE_S}s` })
  t.equal(stuck.headers['x-request-id'], 'frozen-too-long')
  // nothing but the deadline ends the call while the app is frozen: the upper bound only excludes a hang
  t.ok(stuck.ms >= FREEZE_DEADLINE_S * 1000 - 100 && stuck.ms < patient(FREEZE_DEADLINE_S * 1000 + 1000), `at the deadline, not never (${stuck.ms.toFixed(0)} ms)`)
  await assertLeakFree(t, h, 'while the app is still frozen')

  await app.signal('SIGCONT')
  const after = await send(`${h.base}/v4/proj/app/json`)
  t.equal(after.status, 200, 'the app resumed: calls succeed')
  await assertLeakFree(t, h, 'after the app resumed')
  await eventually(async () => await app.connections() <= 7)
  t.ok(await app.connections() <= 7, 'the app holds no more connections than the calls needed at once')
})
