import t from 'tap'
import { fetchMetrics, sampleValue } from '../../helpers/admin-metrics.ts'
import { eventually, startHarness } from '../../helpers/sidecar-harness.ts'
import { connectClient, startWebSocketApp } from '../../helpers/websocket-app.ts'

// WebSocket upgrades wait for their slot like calls: CALLER_MAX_INFLIGHT counts them, and a
// waiting upgrade of urgency 0 goes before one of urgency 5.

t.test('CALLER_MAX_INFLIGHT counts WebSockets; waiting upgrades go by urgency', async t => {
  const app = await startWebSocketApp()
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '2', CALLER_MAX_INFLIGHT: '1' })
  const url = `ws://127.0.0.1:${h.sidecar.port}/v4/proj/app`
  const open: Array<{ terminate: () => void }> = []
  t.teardown(async () => {
    for (const ws of open) ws.terminate()
    await h.close()
    await app.close()
  })
  const queued = async (): Promise<number | undefined> => sampleValue(await fetchMetrics(h.admin), 'sidecar_queued_requests')
  const connect = (path: string, caller: string, priority = 'u=3'): ReturnType<typeof connectClient> =>
    connectClient(`${url}${path}`, [], { headers: { 'x-forwarded-for': caller, priority } }).then(outcome => {
      if (outcome.kind === 'open') open.push(outcome.ws)
      return outcome
    })

  const a1 = await connect('/a1', 'a')
  t.equal(a1.kind, 'open')
  const a5 = connect('/a5', 'a', 'u=5')
  await eventually(async () => await queued() === 1) // waits, a slot free
  const a0 = connect('/a0', 'a', 'u=0')
  await eventually(async () => await queued() === 2)
  const b1 = await connect('/b1', 'b')
  t.equal(b1.kind, 'open', 'another caller goes ahead')
  t.same(app.handshakes.map(h => h.url), ['/a1', '/b1'])
  if (a1.kind === 'open') a1.ws.close()
  const urgent = await a0
  t.equal(urgent.kind, 'open', 'the urgent one first')
  t.same(app.handshakes.map(h => h.url), ['/a1', '/b1', '/a0'])
  t.equal(await queued(), 1, 'the other still waits: a holds its one slot')
  if (urgent.kind === 'open') urgent.ws.close()
  t.equal((await a5).kind, 'open')
  t.same(app.handshakes.map(h => h.url), ['/a1', '/b1', '/a0', '/a5'])
})
