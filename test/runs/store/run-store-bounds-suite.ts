import type { Test } from 'tap'
import { AsyncQueueFullError, BodyTooLargeError, RunNotFoundError } from '../../../src/errors.ts'
import type { RunStore, RunStoreSettings } from '../../../src/runs/store/run-store.ts'
import type { NewRun, RunEventItem, RunScope, TakenRun } from '../../../src/runs/run-data.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import type { OpenStore } from './run-store-suite.ts'

const SCOPE: RunScope = { projectId: 'proj', appName: 'app' }
const SETTINGS: RunStoreSettings = {
  retentionSeconds: 60, maxEvents: 100, maxEventBytes: 64 * 1024 * 1024, queueDepth: 100, queueMaxBytes: 256 * 1024 * 1024, scope: SCOPE
}
let counter = 0

function runWith (body: string | null, scope = SCOPE): NewRun {
  return {
    scope,
    runId: `bounded-${++counter}-${process.pid}`,
    request: { method: 'POST', path: '/work', headers: [], body: body === null ? null : Buffer.from(body) },
    webhook: undefined,
    createdAt: Date.now()
  }
}

/** A follower's items until `done`, or until event `last`. */
async function collect (items: AsyncIterable<RunEventItem>, last = Infinity): Promise<RunEventItem[]> {
  const out: RunEventItem[] = []
  for await (const item of items) {
    out.push(item)
    if (item.type === 'done' || (item.type === 'event' && item.n >= last)) break
  }
  return out
}

/** What a reader from the first event gets up to event `last`, once it is kept (appends may land after they return). */
async function readFromStart (store: RunStore, run: TakenRun, last: number): Promise<RunEventItem[]> {
  await eventually(async () => await store.records.follow(SCOPE, run.runId, last - 1, AbortSignal.timeout(1000)).then(() => true, () => false), 5000)
  return await collect(await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(5000)), last)
}

/** The byte bounds every run store backend keeps (memory, Redis): queued bodies per app, a run's kept events. */
export function runStoreBoundsSuite (t: Test, open: OpenStore): void {
  async function fresh (t: Test, settings: Partial<RunStoreSettings>): Promise<RunStore> {
    const store = await open({ ...SETTINGS, ...settings })
    t.teardown(async () => { await store.close() })
    return store
  }

  t.test('ASYNC_QUEUE_MAX_BYTES: waiting bodies are bounded in bytes per app; a larger body alone is 413; a take (it starts) or a cancel gives the bytes back, a release counts them again', async t => {
    const store = await fresh(t, { queueMaxBytes: 10 })
    const a = runWith('aaaa')
    const b = runWith('bbbb')
    await store.queue.submit(a)
    await store.queue.submit(b)
    const over = runWith('cccc')
    await t.rejects(store.queue.submit(over), AsyncQueueFullError, '12 bytes would wait: refused')
    await t.rejects(store.records.get(SCOPE, over.runId), RunNotFoundError, 'a refused run is not recorded')
    await store.queue.submit(runWith('dd'))
    await store.queue.submit(runWith(null))
    const huge = runWith('x'.repeat(11))
    await t.rejects(store.queue.submit(huge), new BodyTooLargeError(10), 'a body larger than the bound itself')
    await t.rejects(store.records.get(SCOPE, huge.runId), RunNotFoundError)
    t.equal(await store.queue.queuedCount(), 4)

    const taken = await store.queue.take(AbortSignal.timeout(5000))
    await store.queue.release(taken)
    await t.rejects(store.queue.submit(runWith('f')), AsyncQueueFullError, 'taken (started) and given back: waiting again, its bytes counted again')
    const started = await store.queue.take(AbortSignal.timeout(5000))
    t.equal(started.runId, taken.runId, 'given back: taken first again')
    t.equal((await store.queue.start(started, Date.now()))?.request.body?.length, 4, 'started, with its body')
    await store.queue.submit(runWith('ffff'))
    await t.rejects(store.queue.submit(runWith('g')), AsyncQueueFullError, 'started: its 4 bytes went back, no more')
    const waiting = started.runId === a.runId ? b : a
    await store.records.cancel(SCOPE, waiting.runId)
    await store.queue.submit(runWith('gggg'))
    await t.rejects(store.queue.submit(runWith('h')), AsyncQueueFullError, 'canceled: its 4 bytes went back, no more')
    await t.resolves(store.queue.submit(runWith('0123456789', { projectId: 'proj', appName: 'other' })), 'another app has a bound of its own')
  })

  t.test('RUN_MAX_EVENT_BYTES: a run\'s kept events are bounded in bytes (UTF-8), the oldest go first, the newest always stays; a reader from before gets the gap', async t => {
    const store = await fresh(t, { maxEventBytes: 10 })
    await store.queue.submit(runWith(null))
    const run = await store.queue.take(AbortSignal.timeout(5000))
    await store.queue.start(run, Date.now())
    store.records.appendEvent(run, 0, 'ééé') // 6 bytes, 3 characters
    store.records.appendEvent(run, 1, 'ééé')
    t.same((await readFromStart(store, run, 1)), [{ type: 'gap', first: 1 }, { type: 'event', n: 1, data: 'ééé' }], '12 bytes: the first went')
    store.records.appendEvent(run, 2, 'abcd')
    t.same((await readFromStart(store, run, 2)), [{ type: 'gap', first: 1 }, { type: 'event', n: 1, data: 'ééé' }, { type: 'event', n: 2, data: 'abcd' }], 'exactly 10 bytes are kept')
    store.records.appendEvent(run, 3, 'x'.repeat(25))
    t.same((await readFromStart(store, run, 3)), [{ type: 'gap', first: 3 }, { type: 'event', n: 3, data: 'x'.repeat(25) }], 'one event over the bound: it alone stays')
    store.records.appendEvent(run, 4, 'y')
    store.records.appendEvent(run, 5, 'z')
    await store.records.finish(run, { status: 'succeeded', statusCode: 200, resultJson: '[]', runTimeMs: 1, error: undefined, completedAt: Date.now() })
    const items = await collect(await store.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(5000)))
    t.same(items.slice(0, -1), [{ type: 'gap', first: 4 }, { type: 'event', n: 4, data: 'y' }, { type: 'event', n: 5, data: 'z' }])
    t.equal(items.at(-1)?.type, 'done')
    const fromFour = await collect(await store.records.follow(SCOPE, run.runId, 3, AbortSignal.timeout(5000)))
    t.same(fromFour.map(item => item.type === 'event' ? item.n : item.type), [4, 5, 'done'], 'a reader after the gap gets no error')
  })
}
