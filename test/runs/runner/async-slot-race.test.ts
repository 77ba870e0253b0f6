import t from 'tap'
import { MemoryRunStore } from '../../../src/runs/store/memory/memory-run-store.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import type { TakenRun } from '../../../src/runs/run-data.ts'
import { runsClient, startRunsApp } from '../../helpers/runs-client.ts'
import { eventually, startHarness } from '../../helpers/sidecar-harness.ts'

/**
 * A memory store whose first take is held back by the test after the run is taken: the window in
 * which a call can take the slot the runner saw free.
 */
function latchedStore (): { store: RunStore, taken: Promise<void>, letGo: () => void, released: TakenRun[] } {
  const inner = new MemoryRunStore({ retentionSeconds: 60, maxEvents: 100, maxEventBytes: 64 * 1024 * 1024, queueDepth: 10, queueMaxBytes: 256 * 1024 * 1024, scope: undefined })
  const released: TakenRun[] = []
  let takes = 0
  let taken!: () => void
  let letGo!: () => void
  const takenPromise = new Promise<void>(resolve => { taken = resolve })
  const gate = new Promise<void>(resolve => { letGo = resolve })
  const queue = new Proxy(inner.queue, {
    get (target, name) {
      if (name === 'take') {
        return async (signal: AbortSignal) => {
          const run = await target.take(signal)
          if (++takes === 1) {
            taken()
            await gate
          }
          return run
        }
      }
      if (name === 'release') {
        return async (run: TakenRun) => {
          released.push(run)
          await target.release(run)
        }
      }
      const value = Reflect.get(target, name, target) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
  const store = new Proxy(inner, {
    get (target, name) {
      if (name === 'queue') return queue
      const value = Reflect.get(target, name, target) as unknown
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
  return { store, taken: takenPromise, letGo, released }
}

t.test('a call that takes the slot while a run is being taken goes first; the run goes back to the queue, keeps its place, and runs after', async t => {
  const app = await startRunsApp()
  t.teardown(() => app.close())
  const latch = latchedStore()
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1' }, { runStore: latch.store })
  t.teardown(() => h.close())
  const client = runsClient({ base: h.base })
  await eventually(async () => (await client.call('/json/warm')).status === 200)

  t.equal((await client.submit('/json/queued', 'run-raced')).status, 202)
  await latch.taken // the runner saw a free slot and took the run; it is not running yet

  const sync = client.call('/hold/sync')
  const held = await app.waitForHeld(1) // the call holds the only slot
  latch.letGo()
  await eventually(() => latch.released.length === 1)
  t.equal(latch.released[0]?.runId, 'run-raced', 'the run went back to the store')
  const queued = await client.read('run-raced')
  t.equal(queued.record.status, 'queued', 'still queued, for whichever runner has a slot first')
  t.equal(app.requestsTo('/json/queued').length, 0, 'not sent to the app while the call holds the slot')

  held.res.writeHead(200, { 'content-type': 'text/plain' }).end('sync done')
  t.equal((await sync).status, 200, 'the call answered')
  const done = await client.finished('run-raced')
  t.equal(done.record.status, 'succeeded')
  t.equal(app.requestsTo('/json/queued').length, 1, 'run once')
  t.equal(latch.released.length, 1, 'given back once')
  t.ok(app.requests.findIndex(r => r.url === '/hold/sync') < app.requests.findIndex(r => r.url.startsWith('/json/queued')), 'the call reached the app first')
})
