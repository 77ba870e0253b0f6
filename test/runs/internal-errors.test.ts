import t, { type Test } from 'tap'
import { MemoryRunStore } from '../../src/runs/store/memory/memory-run-store.ts'
import { metric } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { runsClient, type RunsApp, type RunsClient, startRunsApp } from '../helpers/runs-client.ts'
import { eventually, type Harness, startHarness } from '../helpers/sidecar-harness.ts'

// An exception in a store write fails that one run, never the process nor the call: it is logged
// once with its stack and counted in sidecar_internal_errors_total.

/** A memory store whose appendEvent throws synchronously (a store write that breaks its contract). */
function throwingStore (): MemoryRunStore {
  const store = new MemoryRunStore({ retentionSeconds: 60, maxEvents: 100, maxEventBytes: 64 * 1024 * 1024, queueDepth: 10, queueMaxBytes: 256 * 1024 * 1024, scope: undefined })
  store.records.appendEvent = () => { throw new Error('store write failed') }
  return store
}

const INTERNAL = { message: 'internal error' }

/** A runs app, and a sidecar in front of it over a throwingStore(), both closed at `t`'s teardown. */
async function sidecarOverThrowingStore (t: Test): Promise<{ app: RunsApp, h: Harness, client: RunsClient }> {
  const app = await startRunsApp()
  t.teardown(() => app.close())
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' }, { runStore: throwingStore() })
  t.teardown(() => h.close())
  return { app, h, client: runsClient({ base: h.base }) }
}

t.test('a store write that throws fails its async run (500), once; the next calls and runs work', async t => {
  const { app, h, client } = await sidecarOverThrowingStore(t)
  t.equal((await client.submit('/ndjson', 'broken-run')).status, 202)
  const held = await app.waitForHeld(1)
  held.res.write('{"n":1}\n{"n":2}\n')
  held.res.end('{"n":3}\n')
  const { record } = await client.finished('broken-run')
  t.equal(record.status, 'failed')
  t.equal(record.status_code, 500)
  t.same(record.error, INTERNAL)
  t.same(record.result, INTERNAL)
  t.equal(await metric(h, 'sidecar_internal_errors_total'), 1, 'counted once')
  const lines = h.logs.filter(line => line.msg === 'internal error')
  t.equal(lines.length, 1, 'logged once')
  t.equal(lines[0]?.level, 50)
  t.equal(lines[0]?.runId, 'broken-run')
  t.match((lines[0]?.err as { stack?: string } | undefined)?.stack, /^Error: store write failed\n {4}at /, 'with its stack')

  t.equal((await client.call('/json/after')).status, 200, 'a plain call works')
  t.equal((await client.submit('/json/after', 'next-run')).status, 202)
  t.equal((await client.finished('next-run')).record.status, 'succeeded', 'a run without events works')
})

t.test('a store write that throws under a recorded sync call: the caller gets its whole answer, the run says it failed', async t => {
  const { app, h, client } = await sidecarOverThrowingStore(t)
  const answer = client.call('/ndjson', { headers: { 'idempotency-key': 'k-broken', 'x-request-id': 'recorded-broken' } })
  const held = await app.waitForHeld(1)
  held.res.write('{"n":1}\n{"n":2}\n')
  held.res.end('{"n":3}\n')
  const got = await answer
  t.equal(got.status, 200)
  t.ok(got.text.startsWith('data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\n'), `the caller's stream is untouched: ${JSON.stringify(got.text)}`)
  t.notMatch(got.text, /event: error/)
  const record = await client.until('recorded-broken', r => r.status !== 'running')
  t.equal(record.status, 'failed')
  t.equal(record.status_code, 500)
  t.same(record.error, INTERNAL)
  t.equal(await metric(h, 'sidecar_internal_errors_total'), 1, 'counted once for the three events')
  t.equal(h.logs.filter(line => line.msg === 'internal error').length, 1, 'logged once')
  await eventually(async () => (await send(`${h.base}${client.prefix}/json/after`, { method: 'POST' })).status === 200)
})
