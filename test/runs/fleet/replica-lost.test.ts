import type { ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { send } from '../../helpers/http-client.ts'
import { heldRunFleet } from '../../helpers/held-run-fleet.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// SIGKILL of the sidecar running a run, with the default heartbeat and lost-after times: the other
// replica fails it with "replica lost" within 60 s (docs/runs.md, "Where runs live": 30 + 10 s),
// sends its webhook, never runs it again.
t.setTimeout(150_000)

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
