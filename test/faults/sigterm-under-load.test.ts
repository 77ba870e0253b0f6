import { Agent, request } from 'node:http'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { startSidecarProcess } from '../helpers/sidecar-process.ts'
import { send } from '../helpers/http-client.ts'
import { eventually, startHarness, startTestServer } from '../helpers/sidecar-harness.ts'
import { patient, sleep, watchTimers } from '../helpers/timing.ts'

// SIGTERM reaches a real sidecar process while 20 callers keep it busy, in rounds: the in-flight
// count touches 0 between two rounds, which a drain must not take for "no more traffic". Every
// call started before or during the drain gets a complete answer (no reset, no refused
// connection) while the load lasts; /readyz is 503 throughout the drain; once the load stops the
// process exits 0 promptly.

const CALLERS = 20

interface Outcome { id: string, startedAt: number, status: number | undefined, error: string | undefined, body: string }

/** One GET on `agent`; never rejects: a failure is recorded as its error code. */
function call (agent: Agent, url: string, id: string): Promise<Outcome> {
  const startedAt = performance.now()
  return new Promise(resolve => {
    const req = request(url, { agent, headers: { 'x-request-id': id } }, res => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('error', error => { resolve({ id, startedAt, status: res.statusCode, error: (error as NodeJS.ErrnoException).code ?? error.message, body: '' }) })
      res.on('end', () => {
        resolve({ id, startedAt, status: res.statusCode, error: res.complete ? undefined : 'incomplete', body: Buffer.concat(chunks).toString() })
      })
    })
    req.on('error', error => { resolve({ id, startedAt, status: undefined, error: (error as NodeJS.ErrnoException).code ?? error.message, body: '' }) })
    req.end()
  })
}

t.test(`SIGTERM under load (${CALLERS} callers, round after round): every call answered in full, /readyz 503, exit 0 once the load stops`, async t => {
  let appRequests = 0
  const app = await startTestServer((req, res) => {
    appRequests++
    // a little work, so the calls of a round overlap
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: req.headers['x-request-id'] }))
    }, 20)
  })
  t.teardown(() => app.close())

  const { child, base, admin, running } = await startSidecarProcess(t, { APP_URL: app.url, DISABLE_AUTH: 'true', RESPONSE_GRACE_PERIOD_SECONDS: '30' })

  // each caller keeps one connection alive, like a load balancer's pool
  const agents = Array.from({ length: CALLERS }, () => new Agent({ keepAlive: true, maxSockets: 1 }))
  t.teardown(() => { for (const agent of agents) agent.destroy() })
  const outcomes: Outcome[] = []
  let stop = false
  // in rounds: all callers at once, then all again as soon as the last answer of the round is in
  const loops = (async () => {
    for (let n = 0; !stop; n++) {
      outcomes.push(...await Promise.all(agents.map(async (agent, caller) => await call(agent, `${base}/v4/proj/app/work`, `load-${caller}-${n}`))))
    }
  })()

  let signalledAt = Infinity
  const readyz: Array<number | string> = []
  try {
    await eventually(() => outcomes.length >= CALLERS * 3) // the load runs: three rounds answered
    signalledAt = performance.now()
    child.process.kill('SIGTERM')
    await child.waitForLine(line => line.msg === 'draining')
    // the first second of the drain, and on a loaded machine as long as the checks below need
    const enoughDuringDrain = (): boolean => readyz.length >= 5 && outcomes.filter(o => o.startedAt > signalledAt).length >= CALLERS * 5
    while (performance.now() - signalledAt < 1000 || !enoughDuringDrain()) {
      readyz.push(await send(`${admin}/readyz`).then(r => r.status, (error: NodeJS.ErrnoException) => error.code ?? 'error'))
      await sleep(50) // pacing: /readyz sampled all through the drain's first second at least
    }
    t.ok(running(), 'still running while the load lasts')
  } finally {
    stop = true
    await loops
  }
  const loadStoppedAt = performance.now()
  const code = await child.exited
  const exitAfter = performance.now() - loadStoppedAt

  const failed = outcomes.filter(o => o.error !== undefined || o.status !== 200)
  t.same(failed.slice(0, 5), [], `no call failed (${failed.length} of ${outcomes.length} did)`)
  const duringDrain = outcomes.filter(o => o.startedAt > signalledAt).length
  t.ok(duringDrain >= CALLERS * 5, `${duringDrain} calls were started during the drain`)
  t.ok(outcomes.length - duringDrain >= CALLERS, `${outcomes.length - duringDrain} before it`)
  const wrong = outcomes.filter(o => o.status === 200).filter(o => {
    const body = JSON.parse(o.body) as { run_id?: string, result?: { id?: string } }
    return body.run_id !== o.id || body.result?.id !== o.id
  })
  t.same(wrong.map(o => o.id), [], 'every answer is the complete envelope of its own call')
  t.equal(appRequests, outcomes.length, 'each call reached the app exactly once')
  t.ok(readyz.length >= 5, `/readyz polled ${readyz.length} times during the drain`)
  t.same([...new Set(readyz)], [503], '/readyz is 503 throughout the drain')

  t.equal(code, 0, `exit 0 (stderr: ${child.stderr})`)
  // promptly: patient(3000) = 12 s is far short of the 30 s grace period it excludes
  t.ok(exitAfter < patient(3000), `exited ${exitAfter.toFixed(0)} ms after the load stopped, not at the grace period`)
  t.match(child.lines.find(line => line.msg === 'stopped'), { clean: true })
  t.equal(child.lines.filter(line => line.msg === 'request').length, outcomes.length, 'one log line per call')
  t.equal(child.lines.filter(line => line.msg === 'request' && line.status !== 200).length, 0)
})

t.test('in process: drain() under round-after-round load keeps serving, and resolves clean once the load stops', async t => {
  const app = await startTestServer((req, res) => {
    setTimeout(() => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}') }, 15)
  })
  t.teardown(() => app.close())
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  let closed = false
  t.teardown(async () => {
    if (!closed) await h.sidecar.close()
    await h.jwks.close()
  })
  await eventually(async () => (await send(`${h.admin}/readyz`)).status === 200)

  const agents = Array.from({ length: 10 }, () => new Agent({ keepAlive: true, maxSockets: 1 }))
  t.teardown(() => { for (const agent of agents) agent.destroy() })
  const outcomes: Outcome[] = []
  let stop = false
  const loops = (async () => {
    for (let n = 0; !stop; n++) {
      outcomes.push(...await Promise.all(agents.map(async (agent, caller) => await call(agent, `${h.base}/v4/proj/app/x`, `inproc-${caller}-${n}`))))
    }
  })()
  let drainedAt = 0
  await eventually(() => outcomes.length >= 10 * 3) // the load runs: three rounds answered
  const drained = h.sidecar.drain(30).then(clean => { drainedAt = performance.now(); closed = true; return clean })
  try {
    // only time shows the drain did not end: the load must outlast its 500 ms quiet period
    await sleep(800)
    await eventually(() => outcomes.length >= 100) // and enough calls for the count below, on a loaded machine
    t.equal(drainedAt, 0, 'the drain waits while calls keep coming')
  } finally {
    stop = true
    await loops
  }
  const stoppedAt = performance.now()
  t.equal(await drained, true, 'clean')
  // after the 500 ms quiet period; patient(3000) = 12 s is far short of the 30 s grace period it excludes
  t.ok(drainedAt - stoppedAt >= 300 && drainedAt - stoppedAt < patient(3000), `ended ${(drainedAt - stoppedAt).toFixed(0)} ms after the load stopped`)
  const failed = outcomes.filter(o => o.status !== 200 || o.error !== undefined)
  t.same(failed.slice(0, 3), [], `no call failed (${failed.length} of ${outcomes.length})`)
  t.ok(outcomes.length >= 100, `${outcomes.length} calls`)
  t.equal(h.sidecar.inflight.count, 0)
  const refused = await send(`${h.base}/v4/proj/app/x`).then(r => r.status, (error: NodeJS.ErrnoException) => error.code)
  t.equal(refused, 'ECONNREFUSED', 'the listener is closed once drained')
})

t.test('in process: drain(0) with nothing in flight is clean and immediate', async t => {
  const app = await startTestServer((_req, res) => { res.end() })
  t.teardown(() => app.close())
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  // the drain's own timers but the grace period's never fire: drain(0) must end without its 500 ms quiet period
  const { held } = watchTimers(t, (ms, stack) => ms > 0 && stack().includes('/drain.') ? 'hold' : undefined)
  const drained = await Promise.race([h.sidecar.drain(0), sleep(patient(2000), { ref: false }).then(() => 'still waiting')])
  t.equal(drained, true, 'nothing was cut, and no quiet period beyond the grace period')
  for (const release of held.splice(0)) release()
  await h.jwks.close()
})

