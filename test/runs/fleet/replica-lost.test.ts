import type { ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { send } from '../../helpers/http-client.ts'
import { heldRunFleet } from '../../helpers/held-run-fleet.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// A replica taken for lost, with the default heartbeat and lost-after times (RUN_LOST_AFTER_SECONDS
// 30, the least the SPEC allows). SIGKILL of the sidecar running a run: the other replica fails it
// with "replica lost" within 60 s (docs/runs.md, "Where runs live": 30 + 10 s), sends its webhook,
// never runs it again. Fencing: a sidecar paused (SIGSTOP: a GC pause, CPU throttling, a frozen VM)
// past RUN_LOST_AFTER_SECONDS is taken for dead the same way; when it comes back and its app
// answers, that end stands: no second webhook, the record and its events unchanged.
// each subtest waits out RUN_LOST_AFTER_SECONDS on a fleet of its own: they wait side by side
t.jobs = 3

t.test('SIGKILL mid-run: the other replica fails the run with 502 "replica lost" within 60 s, sends its webhook once, and never runs it again', async t => {
  const { receiver, apps, sidecars, held } = await heldRunFleet(t, '/hold')
  const record = async (i: number, runId: string): Promise<Record<string, unknown>> =>
    (await send(`${sidecars[i]?.base as string}/v4/p/a/_runs/${runId}`)).json() as Record<string, unknown>

  const hook = encodeURIComponent(`${receiver.url}/hook`)
  const submitted = await send(`${sidecars[0]?.base}/v4/p/a/hold?async=true&webhookEndpoint=${hook}`, { method: 'POST', headers: { 'x-request-id': 'doomed' }, body: '{}' })
  t.equal(submitted.status, 202)
  await eventually(() => held[0] !== undefined || held[1] !== undefined)
  const runner = held[0] !== undefined ? 0 : 1
  const survivor = 1 - runner
  t.equal((await record(survivor, 'doomed')).status, 'running')

  const appCut = new Promise(resolve => { (held[runner] as ServerResponse).once('close', resolve) })
  const killedAt = performance.now()
  sidecars[runner]?.child.process.kill('SIGKILL')
  await sidecars[runner]?.child.exited
  await appCut // the app request died with its sidecar

  let lost: Record<string, unknown> = {}
  await eventually(async () => {
    lost = await record(survivor, 'doomed')
    return lost.status !== 'running'
  }, 70_000)
  const seconds = (performance.now() - killedAt) / 1000
  t.ok(seconds < 60, `failed ${seconds.toFixed(1)} s after the kill (SPEC: within 60 s)`)
  t.equal(lost.status, 'failed')
  t.equal(lost.status_code, 502)
  t.same(lost.error, { message: 'replica lost' })
  t.same(lost.result, { message: 'replica lost' })

  const [attempt] = await receiver.waitForAttempts(1, 15_000)
  const body = JSON.parse(attempt?.body.toString() ?? '{}') as Record<string, unknown>
  t.equal(body.run_id, 'doomed')
  t.equal(body.status_code, 502)
  t.same(body.result, { message: 'replica lost' })
  t.equal(attempt?.headers['x-request-id'], 'doomed')
  await eventually(async () => (await record(survivor, 'doomed')).webhook !== undefined &&
    ((await record(survivor, 'doomed')).webhook as { status: string }).status === 'delivered', 10_000)
  t.same((await record(survivor, 'doomed')).webhook, { status: 'delivered', attempts: 1 })

  // the survivor is free and keeps serving runs; the lost one never ran again anywhere
  const next = await send(`${sidecars[survivor]?.base as string}/v4/p/a/json?async=true`, { method: 'POST', headers: { 'x-request-id': 'after' } })
  t.equal(next.status, 202)
  await eventually(async () => (await record(survivor, 'after')).status === 'succeeded', 10_000)
  const holds = [...(apps[0]?.requests ?? []), ...(apps[1]?.requests ?? [])].filter(r => r.url.startsWith('/hold'))
  t.equal(holds.length, 1, 'the lost run reached an app once')
  t.equal(receiver.attempts.length, 1, 'one webhook')
})

t.test('SIGSTOP past RUN_LOST_AFTER_SECONDS, then SIGCONT and the app answers: one webhook, the "replica lost" record and its events unchanged', async t => {
  const { receiver, apps, sidecars, held } = await heldRunFleet(t, '/stream', res => {
    res.writeHead(200, { 'content-type': 'application/x-ndjson' }).write('{"n":0}\n')
  }, { RUN_LOST_AFTER_SECONDS: '30' })
  const base = (i: number): string => (sidecars[i] as typeof sidecars[number]).base
  const record = async (i: number): Promise<Record<string, unknown>> => (await send(`${base(i)}/v4/p/a/_runs/paused`)).json() as Record<string, unknown>
  // read once the run has ended (a running run's events go on)
  const events = async (i: number): Promise<string> => (await send(`${base(i)}/v4/p/a/_runs/paused/events`)).body.toString()

  const hook = encodeURIComponent(`${receiver.url}/hook`)
  const submitted = await send(`${base(0)}/v4/p/a/stream?async=true&webhookEndpoint=${hook}`, { method: 'POST', headers: { 'x-request-id': 'paused' }, body: '{}' })
  t.equal(submitted.status, 202)
  await eventually(() => held[0] !== undefined || held[1] !== undefined)
  const runner = held[0] !== undefined ? 0 : 1
  const survivor = 1 - runner
  await eventually(async () => (await record(survivor)).status === 'running')

  const paused = sidecars[runner]
  paused.child.process.kill('SIGSTOP')
  t.teardown(() => { paused.child.process.kill('SIGCONT') })
  let lost: Record<string, unknown> = {}
  await eventually(async () => {
    lost = await record(survivor)
    return lost.status === 'failed'
  }, 70_000)
  t.equal(lost.status_code, 502)
  t.same(lost.result, { message: 'replica lost' })
  await receiver.waitForAttempts(1, 15_000)
  await eventually(async () => ((await record(survivor)).webhook as { status?: string } | undefined)?.status === 'delivered', 10_000)
  const decided = await record(survivor)
  const decidedEvents = await events(survivor)

  // the paused sidecar comes back; its app goes on streaming and answers
  const backLine = paused.child.waitForLine(line => line.msg === 'async run ended by another replica meanwhile (this one was taken for lost): its answer here is not recorded, no webhook sent', 30_000)
  paused.child.process.kill('SIGCONT')
  const app = held[runner] as ServerResponse
  app.write('{"n":1}\n')
  app.end('{"n":2}\n')
  const line = await backLine
  t.equal(line.runId, 'paused')
  t.equal(line.status, 'failed')

  // a later run on the comeback replica still works (it serves again), and proves it has caught up
  const next = await send(`${base(runner)}/v4/p/a/json?async=true`, { method: 'POST', headers: { 'x-request-id': 'after' } })
  t.equal(next.status, 202)
  await eventually(async () => ((await send(`${base(runner)}/v4/p/a/_runs/after`)).json() as { status: string }).status === 'succeeded', 15_000)

  t.same(await record(runner), decided, 'the record is as the survivor decided it, read on the comeback replica')
  t.same(await record(survivor), decided)
  t.equal(await events(survivor), decidedEvents, 'no event appended by the comeback replica')
  t.equal(receiver.attempts.length, 1, 'one webhook')
  const holds = [...(apps[0]?.requests ?? []), ...(apps[1]?.requests ?? [])].filter(r => r.url.startsWith('/stream'))
  t.equal(holds.length, 1, 'the run reached an app once')
})

t.test('a keyed sync call at the app, its sidecar SIGSTOPped past RUN_LOST_AFTER_SECONDS: the retry elsewhere replays "replica lost", the app ran it once', async t => {
  const { apps, sidecars, held } = await heldRunFleet(t, '/keyed', () => {}, { RUN_LOST_AFTER_SECONDS: '30' })
  const [holder, other] = sidecars
  const keyed = async (base: string): Promise<ReturnType<typeof send>> =>
    await send(`${base}/v4/p/a/keyed`, { method: 'POST', headers: { 'idempotency-key': 'paused-key', 'x-request-id': 'keyed-run' }, body: '{}' })
  const first = keyed(holder.base)
  first.catch(() => {}) // its sidecar is paused: whatever it answers after, the test reads the key's answer elsewhere
  await eventually(() => held[0] !== undefined)
  t.equal((await keyed(other.base)).status, 409, 'a retry while it runs: 409')

  holder.child.process.kill('SIGSTOP')
  t.teardown(() => { holder.child.process.kill('SIGCONT') })
  const record = async (): Promise<Record<string, unknown>> => (await send(`${other.base}/v4/p/a/_runs/keyed-run`)).json() as Record<string, unknown>
  await eventually(async () => (await record()).status === 'failed', 70_000)
  t.match(await record(), { status: 'failed', status_code: 502, result: { message: 'replica lost' } }, 'the other sidecar ends it "replica lost"')
  const retry = await keyed(other.base)
  t.equal(retry.status, 502, 'the retry gets that answer')
  t.equal(retry.text, '{"message":"replica lost"}')
  t.equal(retry.headers['idempotent-replayed'], 'true')

  holder.child.process.kill('SIGCONT')
  ;(held[0] as ServerResponse).writeHead(200, { 'content-type': 'application/json' }).end('{"late":true}')
  await first.catch(() => undefined)
  t.equal((await keyed(other.base)).status, 502, 'the late answer does not replace it')
  t.equal(((await send(`${holder.base}/v4/p/a/_runs/keyed-run`)).json() as { status: string }).status, 'failed', 'read on the comeback replica too')
  const calls = [...apps[0].requests, ...apps[1].requests].filter(r => r.url.startsWith('/keyed'))
  t.equal(calls.length, 1, 'one app call')
})
