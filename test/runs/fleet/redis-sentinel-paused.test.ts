import t from 'tap'
import { startSentinelRedis } from '../../helpers/redis-topologies.ts'
import { runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import { patient } from '../../helpers/timing.ts'

// A sentinel on a paused host (SIGSTOP: it takes connections and answers nothing) while the primary
// dies. The sidecar asks the next sentinel after 1 s rather than waiting on it, and the failover's
// news reaching it while it asks (which makes ioredis give its connection up for good) does not
// leave it without a run store: it follows the new primary within 10 s, and once the sentinel is
// back, goes on. Before: it waited on the paused sentinel for as long as it was paused, then
// answered 503 until restarted.

t.test('a paused sentinel during a failover: the sidecar follows the new primary, and goes on once it is back', async t => {
  const topology = await startSentinelRedis(t)
  if (topology === undefined) return
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { DISABLE_AUTH: 'true', PROJECT_ID: 'p', APP_NAME: 'a', RUN_STORE_URL: topology.url })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'before')).status, 202)
  t.equal((await client.finished('before')).record.status, 'succeeded')

  // the first sentinel of RUN_STORE_URL: the one the sidecar asked, and asks first again
  const resume = topology.pauseSentinel(0)
  t.teardown(resume)
  await topology.failover()
  const named = performance.now()
  await eventually(async () => (await client.submit('/json', 'during')).status === 202, 10_000)
  // 10 s on a quiet machine; the bug's alternative (waiting on the sentinel paused until resume() below) outlasts any ceiling
  t.ok(performance.now() - named < patient(10_000), `accepted ${Math.round(performance.now() - named)} ms after the other sentinels named the new primary`)
  t.equal((await client.finished('during')).record.status, 'succeeded', 'and run')

  resume()
  // the paused sentinel's late answers and the failover's news reach the sidecar now: it goes on
  await new Promise(resolve => setTimeout(resolve, 3000))
  for (const id of ['after-0', 'after-1', 'after-2']) {
    t.equal((await client.submit('/json', id)).status, 202, `${id} accepted`)
    t.equal((await client.finished(id)).record.status, 'succeeded', `${id} run`)
  }
  t.equal((await client.finished('before')).record.status, 'succeeded', 'the run from before is still there')
})
