import { Redis } from 'ioredis'
import t from 'tap'
import { RunNotFoundError, RunStoreUnavailableError } from '../../../src/errors.ts'
import { RedisRunStore, type RedisStoreSettings } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { RunStoreListener, RunStoreSettings } from '../../../src/runs/store/run-store.ts'
import { type HeldDelivery, type NewRun, type RunView, type TakenRun, UNREAD_REQUEST } from '../../../src/runs/run-data.ts'
import { recordedRun } from '../../../src/runs/run-record.ts'
import { flushRedis, startPrivateRedis, testRedis } from '../../helpers/redis-server.ts'
import { refusedPort } from '../../helpers/ports.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import { runStoreBoundsSuite } from './run-store-bounds-suite.ts'
import { runStoreSuite } from './run-store-suite.ts'

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

const SCOPE = { projectId: 'proj', appName: 'app' }
const SETTINGS: RedisStoreSettings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 64 * 1024 * 1024, queueDepth: 100, queueMaxBytes: 256 * 1024 * 1024, scope: SCOPE }
let counter = 0
const newRun = (): NewRun => ({
  scope: SCOPE, runId: `r${++counter}`, request: { method: 'POST', path: '/x', headers: [], body: Buffer.from('b') }, webhook: { url: new URL('https://h.example/'), secret: 'k' }, createdAt: Date.now()
})
const listener = (overrides: Partial<RunStoreListener>): RunStoreListener => ({ canceled: () => {}, lost: () => {}, expired: () => {}, availability: () => {}, ...overrides })

t.test('redis run store', async t => {
  const redisUrl = await testRedis(t)
  if (redisUrl === undefined) return
  const open = async (settings: RunStoreSettings): Promise<RedisRunStore> => {
    const scope = settings.scope ?? SCOPE
    await flushRedis(redisUrl)
    const store = new RedisRunStore(redisUrl, { ...settings, scope })
    await store.reachable(5000)
    return store
  }
  /** A store whose consumer is 'ender', on an empty Redis, and a connection to look at what it wrote. */
  const enderStore = async (t: Tap): Promise<{ store: RedisRunStore, probe: Redis }> => {
    await flushRedis(redisUrl)
    const store = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'ender' })
    t.teardown(() => { void store.close() })
    await store.reachable(5000)
    const probe = new Redis(redisUrl)
    t.teardown(() => { probe.disconnect() })
    return { store, probe }
  }
  runStoreSuite(t, open)
  runStoreBoundsSuite(t, open)

  t.test('two sidecars share runs: read, follow and cancel on the other; takes spread', async t => {
    await flushRedis(redisUrl)
    const canceledOnA: string[] = []
    const a = new RedisRunStore(redisUrl, SETTINGS)
    const b = new RedisRunStore(redisUrl, SETTINGS)
    t.teardown(async () => { await a.close(); await b.close() })
    await Promise.all([a.reachable(5000), b.reachable(5000)])
    a.listen(listener({ canceled: (_scope, runId) => { canceledOnA.push(runId) } }))
    const run = newRun()
    await a.queue.submit(run)
    t.equal((await b.records.get(SCOPE, run.runId)).record.status, 'queued')
    const taken = await a.queue.take(AbortSignal.timeout(5000))
    await a.queue.start(taken, Date.now())
    const follower = (await b.records.follow(SCOPE, run.runId, -1, AbortSignal.timeout(5000)))[Symbol.asyncIterator]()
    const first = follower.next()
    a.records.appendEvent(taken, 0, 'from a')
    t.same((await first).value, { type: 'event', n: 0, data: 'from a' })
    t.equal((await b.records.cancel(SCOPE, run.runId)).record.status, 'canceled')
    await eventually(() => canceledOnA.length === 1, 1000)
    // the listener's canceled() is called only from the app's cancel channel: hearing it proves pub/sub carried it
    t.same(canceledOnA, [run.runId], 'the owner hears of the cancel through its cancel channel')
    t.equal((await follower.next()).value?.type, 'done')
    for (let i = 0; i < 10; i++) await a.queue.submit(newRun())
    const byStore = { a: 0, b: 0 }
    const takes: Array<Promise<unknown>> = []
    for (let i = 0; i < 5; i++) {
      takes.push(a.queue.take(AbortSignal.timeout(5000)).then(() => { byStore.a++ }))
      takes.push(b.queue.take(AbortSignal.timeout(5000)).then(() => { byStore.b++ }))
    }
    await Promise.all(takes)
    t.same(byStore, { a: 5, b: 5 })
    t.equal(await a.queue.queuedCount(), 0, 'taken: started, out of the backlog')
    t.equal(await a.queue.runningCount(), 10)
  })

  t.test('a lost sidecar: each run it took (a take starts it) fails "replica lost" once, never runs again; a live one is left alone', async t => {
    await flushRedis(redisUrl)
    const timing = { heartbeatMs: 200, lostAfterMs: 1000 }
    const dead = new RedisRunStore(redisUrl, SETTINGS, timing)
    const alive = new RedisRunStore(redisUrl, SETTINGS, timing)
    const survivor = new RedisRunStore(redisUrl, SETTINGS, timing)
    const lost: Array<{ run: TakenRun, view: RunView }> = []
    // either live store may take over the lost one's runs: both report
    for (const store of [alive, survivor]) store.listen(listener({ lost: (run, view) => { lost.push({ run, view }) } }))
    t.teardown(async () => { await alive.close(); await survivor.close() })
    await Promise.all([dead.reachable(5000), alive.reachable(5000), survivor.reachable(5000)])
    const running = newRun()
    const taken = newRun()
    const kept = newRun()
    await dead.queue.submit(running)
    await dead.queue.submit(taken)
    await dead.queue.submit(kept)
    const r1 = await dead.queue.take(AbortSignal.timeout(5000))
    await dead.queue.start(r1, Date.now())
    await dead.queue.take(AbortSignal.timeout(5000)) // started by its take, never sent to the app
    const k = await alive.queue.take(AbortSignal.timeout(5000))
    await alive.queue.start(k, Date.now())
    await dead.close() // no finish, no heartbeat: as if killed
    await eventually(() => lost.length === 2, 5000)
    t.same(lost.map(({ run }) => run.runId).sort(), [running.runId, taken.runId].sort())
    const failed = lost.find(({ run }) => run.runId === running.runId) as { run: TakenRun, view: RunView }
    t.same([failed.run.webhook?.url.href, failed.run.webhook?.secret], ['https://h.example/', 'k'])
    t.equal(failed.view.record.status, 'failed')
    t.equal(failed.view.record.status_code, 502)
    t.same(failed.view.record.error, { message: 'replica lost' })
    t.equal(failed.view.resultJson, '{"message":"replica lost"}')
    for (const run of [running, taken]) t.equal((await survivor.records.get(SCOPE, run.runId)).record.status, 'failed')
    await t.rejects(Promise.race([survivor.queue.take(AbortSignal.timeout(1500)), alive.queue.take(AbortSignal.timeout(1500))]), 'nothing to take: not run again')
    t.equal(lost.length, 2, 'failed once each')
    t.equal((await survivor.records.get(SCOPE, kept.runId)).record.status, 'running', 'a run whose sidecar beats is left alone')
  })

  t.test('durable deliveries: held before the first attempt; a lost sidecar\'s and a left one go to another with their attempts; done ones are gone', async t => {
    await flushRedis(redisUrl)
    const timing = { heartbeatMs: 200, lostAfterMs: 1500 }
    const lost: HeldDelivery[] = []
    const a = new RedisRunStore(redisUrl, SETTINGS, { ...timing, consumer: 'a' })
    const b = new RedisRunStore(redisUrl, SETTINGS, { ...timing, consumer: 'b' })
    t.teardown(async () => { await a.close(); await b.close() })
    await Promise.all([a.reachable(5000), b.reachable(5000)])
    b.listen(listener({ deliveryLost: delivery => { lost.push(delivery) } }))
    const target = { url: new URL('https://hooks.example/x'), secret: 'whsec' }
    const delivery = { scope: SCOPE, runId: 'hooked', target, body: '{"run_id":"hooked"}' }
    const kept = await a.deliveries.hold(delivery)
    t.match(kept, { ...delivery, attempts: 0 })
    await a.deliveries.attempt(kept)
    const done = await a.deliveries.hold({ ...delivery, runId: 'done' })
    await a.deliveries.done(done)
    const trace = { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', tracestate: 'vendor=abc' }
    await a.deliveries.hold({ ...delivery, runId: 'kept-alive', target: { url: target.url, secret: undefined }, trace })
    // a keeps its deliveries alive past lostAfterMs: b takes none of them
    await new Promise(resolve => setTimeout(resolve, 2000))
    t.same(lost, [], 'a live sidecar keeps its deliveries')

    await a.deliveries.leave(kept, true) // SIGTERM: left for another at once
    await eventually(() => lost.some(d => d.runId === 'hooked'), 3000)
    const hooked = lost.find(d => d.runId === 'hooked')
    t.match(hooked, { scope: SCOPE, runId: 'hooked', body: delivery.body, attempts: 2 }, 'taken over with the attempts made (the first counted as it was held), the body and the secret')
    t.same([hooked?.target.url.href, hooked?.target.secret], ['https://hooks.example/x', 'whsec'])
    await a.close() // a is gone: its other delivery goes to b once it has been idle lostAfterMs
    await eventually(() => lost.some(d => d.runId === 'kept-alive'), 5000)
    t.equal(lost.length, 2, 'each taken over once')
    t.match(lost.find(d => d.runId === 'kept-alive'), { runId: 'kept-alive', attempts: 1 })
    t.equal(lost.find(d => d.runId === 'kept-alive')?.target.secret, undefined)
    t.same(lost.find(d => d.runId === 'kept-alive')?.trace, trace, 'the trace it continues goes with it')
    t.equal(lost.find(d => d.runId === 'hooked')?.trace, undefined, 'one without trace context has none')
    t.equal(lost.filter(d => d.runId === 'done').length, 0, 'a finished delivery is never taken over')
    for (const taken of lost) await b.deliveries.done(taken)
    const probe = new Redis(redisUrl)
    t.teardown(() => probe.disconnect())
    t.equal(await probe.xlen('as:{proj/app}:deliveries'), 0, 'nothing left in the stream')
    t.same(await probe.keys('as:{proj/app}:delivery:*'), [], 'no delivery kept, no secret')
  })

  t.test('a delivery left because this sidecar\'s bounds were full comes back to it at its next heartbeat', async t => {
    await flushRedis(redisUrl)
    const back: HeldDelivery[] = []
    const store = new RedisRunStore(redisUrl, SETTINGS, { heartbeatMs: 200, lostAfterMs: 1500, consumer: 'busy' })
    t.teardown(async () => { await store.close() })
    await store.reachable(5000)
    store.listen(listener({ deliveryLost: delivery => { back.push(delivery) } }))
    const held = await store.deliveries.hold({ scope: SCOPE, runId: 'deferred', target: { url: new URL('https://hooks.example/x'), secret: undefined }, body: '{}' })
    await store.deliveries.leave(held, false)
    await eventually(() => back.length === 1, 3000)
    t.match(back[0], { runId: 'deferred', attempts: 1 }, 'taken back by the same sidecar, its first attempt counted')
    await store.deliveries.done(back[0] as HeldDelivery)
  })

  t.test('an Idempotency-Key claim is a lease its sidecar renews: held while it lives, free soon after it dies', async t => {
    await flushRedis(redisUrl)
    const timing = { heartbeatMs: 200, lostAfterMs: 1000 } // a lease of 1.2 s
    const a = new RedisRunStore(redisUrl, SETTINGS, { ...timing, consumer: 'claimer' })
    const b = new RedisRunStore(redisUrl, SETTINGS, { ...timing, consumer: 'other' })
    const probe = new Redis(redisUrl)
    t.teardown(async () => { await a.close(); await b.close(); probe.disconnect() })
    await Promise.all([a.reachable(5000), b.reachable(5000)])
    t.equal(await a.keys.claim(SCOPE, 'leased', { runId: 'first', digest: 'd', async: false }), undefined)
    t.equal(await a.keys.claim(SCOPE, 'answered', { runId: 'done', digest: 'd', async: false }), undefined)
    await a.keys.keepAnswer(SCOPE, 'answered', 'done', { status: 200, contentType: undefined, body: Buffer.from('ok') })
    await new Promise(resolve => setTimeout(resolve, 2500)) // twice the lease: the heartbeat renewed it
    t.equal((await b.keys.claim(SCOPE, 'leased', { runId: 'retry', digest: 'd', async: false }))?.runId, 'first', 'still held while its sidecar lives')
    await a.close()
    // what the slot has left once its sidecar is gone is the lease (1.2 s), not a retention: gone already (-2) or at most that
    const left = await probe.pttl('as:{proj/app}:key:leased')
    t.ok(left === -2 || (left > 0 && left <= 1200), `free within a lease of its sidecar's end (${left} ms left)`)
    await eventually(async () => await b.keys.claim(SCOPE, 'leased', { runId: 'retry', digest: 'd', async: false }) === undefined, 5000)
    t.equal((await b.keys.claim(SCOPE, 'answered', { runId: 'x', digest: 'd', async: false }))?.answer?.body.toString(), 'ok', 'an answered key is kept RUN_RETENTION_SECONDS, lease or not')
  })

  t.test('a keyed sync run\'s claim never lapses: its sidecar silent past lostAfterMs, the run ends "replica lost", the retry replays that, the late end is refused', async t => {
    await flushRedis(redisUrl)
    // 'paused' claims, then stops beating and looking (closed while it holds the claim, as a frozen
    // process looks to the others); it comes back as a store of the same name
    const a = new RedisRunStore(redisUrl, SETTINGS, { heartbeatMs: 200, lostAfterMs: 1000, consumer: 'paused' })
    const b = new RedisRunStore(redisUrl, SETTINGS, { heartbeatMs: 200, lostAfterMs: 1000, consumer: 'survivor' })
    const back = new RedisRunStore(redisUrl, SETTINGS, { heartbeatMs: 200, lostAfterMs: 1000, consumer: 'paused' })
    t.teardown(async () => { await b.close(); await back.close() })
    await Promise.all([a.reachable(5000), b.reachable(5000), back.reachable(5000)])
    const keyed = (runId: string): TakenRun => recordedRun({ scope: SCOPE, runId, request: { method: 'POST', path: '/x', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
    const first = keyed('first')
    t.equal(await a.keys.claim(SCOPE, 'slot', { runId: 'first', digest: 'd', async: false }, first), undefined, 'the first request claims the key and reaches the app')
    const early = await b.keys.claim(SCOPE, 'slot', { runId: 'retry', digest: 'd', async: false }, keyed('retry'))
    t.same([early?.runId, early?.answer], ['first', undefined], 'a retry at once: the key is held (409)')
    await a.close()
    const failed = await eventually(async () => (await b.records.get(SCOPE, 'first')).record.status === 'failed', 5000).then(async () => await b.records.get(SCOPE, 'first'))
    t.match(failed, { record: { status: 'failed', status_code: 502 }, resultJson: '{"message":"replica lost"}' }, 'the survivor\'s heartbeat ends it "replica lost", no retry needed')
    const retry = await b.keys.claim(SCOPE, 'slot', { runId: 'retry', digest: 'd', async: false }, keyed('retry'))
    t.same([retry?.runId, retry?.answer?.status, retry?.answer?.contentType, retry?.answer?.body.toString()], ['first', 502, 'application/json', '{"message":"replica lost"}'], 'the retry replays that: never a second run')
    // the paused sidecar comes back with its app's answer: refused
    const late = await back.records.finish(first, { status: 'succeeded', statusCode: 200, resultJson: '"late"', runTimeMs: 5, error: undefined, completedAt: Date.now() },
      { slot: 'slot', answer: { status: 200, contentType: 'text/plain', body: Buffer.from('late') } })
    t.equal(late.endedElsewhere, true, 'its end is not recorded')
    t.same((await b.records.get(SCOPE, 'first')).record, failed.record, 'the record as the survivor decided it')
    t.equal((await b.keys.claim(SCOPE, 'slot', { runId: 'again', digest: 'd', async: false }, keyed('again')))?.answer?.status, 502, 'the key keeps "replica lost"')
  })

  t.test('a keyed sync run\'s claim is held as long as its sidecar beats, past any lease', async t => {
    await flushRedis(redisUrl)
    const timing = { heartbeatMs: 200, lostAfterMs: 1000 }
    const a = new RedisRunStore(redisUrl, SETTINGS, { ...timing, consumer: 'holder' })
    const b = new RedisRunStore(redisUrl, SETTINGS, { ...timing, consumer: 'other' })
    t.teardown(async () => { await a.close(); await b.close() })
    await Promise.all([a.reachable(5000), b.reachable(5000)])
    const run = recordedRun({ scope: SCOPE, runId: 'long', request: { method: 'POST', path: '/x', headers: [], body: null }, webhook: undefined, createdAt: Date.now() })
    t.equal(await a.keys.claim(SCOPE, 'slot', { runId: 'long', digest: 'd', async: false }, run), undefined)
    await new Promise(resolve => setTimeout(resolve, 2500)) // twice lostAfterMs and more: a's heartbeat renewed it
    t.equal((await b.keys.claim(SCOPE, 'slot', { runId: 'retry', digest: 'd', async: false }))?.runId, 'long', 'still held')
    t.equal((await b.records.get(SCOPE, 'long')).record.status, 'running', 'and still running')
    const view = await a.records.finish(run, { status: 'succeeded', statusCode: 200, resultJson: '"ok"', runTimeMs: 5, error: undefined, completedAt: Date.now() },
      { slot: 'slot', answer: { status: 200, contentType: 'text/plain', body: Buffer.from('ok') } })
    t.equal(view.record.status, 'succeeded')
    t.equal((await b.keys.claim(SCOPE, 'slot', { runId: 'retry', digest: 'd', async: false }))?.answer?.body.toString(), 'ok', 'its answer kept for the retry')
  })

  t.test('a take\'s run starts at once; a start tried again after its answer was lost (it was written) goes on; another sidecar\'s does not', async t => {
    await flushRedis(redisUrl)
    const a = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'starter' })
    const b = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'other' })
    t.teardown(() => { void a.close(); void b.close() })
    await a.reachable(5000)
    const run = newRun()
    await a.queue.submit(run)
    const taken = await a.queue.take(AbortSignal.timeout(5000))
    t.equal(taken.unread, undefined, 'taken and started in one step')
    t.same(taken.request, run.request, 'with its request')
    t.same((await a.queue.start(taken, Date.now()))?.request, run.request, 'start: nothing left to do, it runs')
    // as a take whose answer was lost hands it on (ownPending): the run alone, its request read as it starts
    const unread = { ...taken, unread: true as const, request: UNREAD_REQUEST, webhook: undefined }
    t.same((await a.queue.start(unread, Date.now()))?.request, run.request, 'the same sidecar: its own start, it runs')
    // the same sidecar without the record it wrote: it reads the run, and its request, back
    const again = new RedisRunStore(redisUrl, SETTINGS, { consumer: 'starter' })
    t.teardown(() => { void again.close() })
    await again.reachable(5000)
    const read = await again.queue.start(unread, Date.now())
    t.same([read?.request, read?.webhook?.secret], [run.request, 'k'], 'its own start, read back with its request and webhook')
    t.equal(await b.queue.start(unread, Date.now()), undefined, 'another sidecar: not its run to start')
    t.equal((await a.records.get(SCOPE, taken.runId)).record.status, 'running')
  })

  t.test('a run queued by the version before (its entry names the run alone) is taken (its record read), starts with its request and runs', async t => {
    await flushRedis(redisUrl)
    const store = new RedisRunStore(redisUrl, SETTINGS)
    t.teardown(() => { void store.close() })
    await store.reachable(5000)
    const probe = new Redis(redisUrl)
    t.teardown(() => { probe.disconnect() })
    // as that version's SUBMIT wrote it
    const record = `{"run_id":"old-1","status":"queued","created_at":"${new Date().toISOString()}"}`
    const id = await probe.xadd('as:{proj/app}:queue', '*', 'run', 'old-1') as string
    await probe.hset('as:{proj/app}:run:old-1', 'record', record, 'request', '{"method":"PUT","path":"/old","headers":["a","b"],"hasBody":true}', 'body', 'old body', 'async', '1', 'entry', id, 'queued_bytes', 8)
    await probe.set('as:{proj/app}:queued-bytes', 8)
    const taken = await store.queue.take(AbortSignal.timeout(5000))
    t.equal(taken.runId, 'old-1')
    t.equal(taken.createdAt, Date.parse((JSON.parse(record) as { created_at: string }).created_at), 'its record read at the take')
    const started = await store.queue.start(taken, Date.now())
    t.same(started?.request, { method: 'PUT', path: '/old', headers: ['a', 'b'], body: Buffer.from('old body') }, 'its request read with the start')
    t.equal(await probe.get('as:{proj/app}:queued-bytes'), '0', 'its bytes left the queue')
    t.equal((await store.records.finish(taken, { status: 'succeeded', statusCode: 200, resultJson: '{}', runTimeMs: 1, error: undefined, completedAt: Date.now() })).record.status, 'succeeded')
  })

  t.test('an end written with its webhook\'s delivery in one step: held by the sidecar ending it; none written when a cancel came first', async t => {
    const { store, probe } = await enderStore(t)
    const outcome = { status: 'succeeded', statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 5, error: undefined, completedAt: Date.now() } as const
    const deliveryOf = (taken: TakenRun) => (view: RunView) => ({ scope: SCOPE, runId: taken.runId, target: { url: new URL('https://h.example/hook'), secret: 'k' }, body: `{"status":"${view.record.status}"}` })

    await store.queue.submit(newRun())
    const taken = await store.queue.take(AbortSignal.timeout(5000))
    t.equal((await store.queue.start(taken, Date.now()))?.runId, taken.runId, 'started')
    const ended = await store.records.finish(taken, outcome, undefined, deliveryOf(taken))
    t.equal(ended.record.status, 'succeeded')
    t.match(ended.delivery, { runId: taken.runId, attempts: 0, body: '{"status":"succeeded"}' })
    const pending = await probe.xpending('as:{proj/app}:deliveries', 'senders', '-', '+', 10) as Array<[string, string]>
    t.same(pending.map(([id, consumer]) => [id, consumer]), [[ended.delivery?.entry.split(' ')[0], 'ender']], 'held by the sidecar that ended the run')

    await store.queue.submit(newRun())
    const canceled = await store.queue.take(AbortSignal.timeout(5000))
    t.equal((await store.queue.start(canceled, Date.now()))?.runId, canceled.runId, 'started')
    await store.records.cancel(SCOPE, canceled.runId)
    const after = await store.records.finish(canceled, outcome, undefined, deliveryOf(canceled))
    t.equal(after.record.status, 'canceled')
    t.equal(after.delivery, undefined, 'the cancel came first: no delivery written with an end that was not written')
    t.equal(await probe.xlen('as:{proj/app}:deliveries'), 1)
  })

  t.test('an end tried again after its reply was lost (it was written, with its delivery): this run\'s end, and the same delivery, held once', async t => {
    const { store, probe } = await enderStore(t)
    const outcome = { status: 'succeeded' as const, statusCode: 200, resultJson: '{}', runTimeMs: 1, error: undefined, completedAt: Date.now() }
    const deliveryOf = (view: RunView) => ({ scope: SCOPE, runId: 'again', target: { url: new URL('https://h.example/hook'), secret: 'k' }, body: `{"status":"${view.record.status}"}` })
    await store.queue.submit({ ...newRun(), runId: 'again' })
    const taken = await store.queue.take(AbortSignal.timeout(5000))
    await store.queue.start(taken, Date.now())
    const first = await store.records.finish(taken, outcome, undefined, deliveryOf)
    // the same end again, as after a reply that never came: the record it finds is its own end
    const again = await store.records.finish(taken, outcome, undefined, deliveryOf)
    t.equal(again.endedElsewhere, undefined, 'not taken for another sidecar\'s end (which would send no webhook)')
    t.equal(again.record.status, 'succeeded')
    t.same(again.delivery, first.delivery, 'the delivery written with the end, to send')
    t.equal(await probe.xlen('as:{proj/app}:deliveries'), 1, 'one delivery written, not two')
  })

  t.test('the hash of an ended run: its webhook state beside the record (the record not rewritten), no request, body, secret or queued bytes left; the events key gets a TTL only when there are events', async t => {
    const { store, probe } = await enderStore(t)
    const outcome = { status: 'succeeded' as const, statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 1, error: undefined, completedAt: Date.now() }
    await store.queue.submit({ ...newRun(), runId: 'hashed' })
    t.equal(await probe.get('as:{proj/app}:queued-bytes'), '1', 'its body counted while it waits')
    const taken = await store.queue.take(AbortSignal.timeout(5000))
    await store.queue.start(taken, Date.now())
    t.equal(await probe.get('as:{proj/app}:queued-bytes'), '0', 'and no longer once it started')
    t.equal(await probe.hget('as:{proj/app}:run:hashed', 'queued_bytes'), '0')
    const ended = await store.records.finish(taken, outcome)
    const raw = await probe.hget('as:{proj/app}:run:hashed', 'record')
    t.same(Object.keys(await probe.hgetall('as:{proj/app}:run:hashed')).sort(), ['async', 'entry', 'owner', 'record', 'result', 'sub'], 'what an ended run keeps')
    t.ok(await probe.ttl('as:{proj/app}:run:hashed') > 0, 'for its retention')
    t.equal(await probe.exists('as:{proj/app}:events:hashed'), 0, 'no events: no events key')

    await store.records.webhookDone(SCOPE, 'hashed', 'delivered', 1)
    t.equal(await probe.hget('as:{proj/app}:run:hashed', 'record'), raw, 'the record as it was')
    t.equal(await probe.hget('as:{proj/app}:run:hashed', 'webhook_state'), 'delivered 1', 'the state beside it')
    const read = await store.records.get(SCOPE, 'hashed')
    t.same(read.record, { ...ended.record, webhook: { status: 'delivered', attempts: 1 } }, 'read into the record')
    await probe.del('as:{proj/app}:run:hashed')
    await t.rejects(store.records.webhookDone(SCOPE, 'hashed', 'failed', 2), RunNotFoundError, 'a run gone: 404')
    t.equal(await probe.exists('as:{proj/app}:run:hashed'), 0, 'and no hash made again without a TTL')

    await store.queue.submit({ ...newRun(), runId: 'streamed' })
    const streamed = await store.queue.take(AbortSignal.timeout(5000))
    await store.queue.start(streamed, Date.now())
    store.records.appendEvent(streamed, 0, 'zero')
    await eventually(async () => await probe.xlen('as:{proj/app}:events:streamed') === 1, 5000)
    t.equal(await probe.ttl('as:{proj/app}:events:streamed'), -1, 'a running run\'s events: no TTL yet')
    await store.records.finish(streamed, outcome)
    t.ok(await probe.ttl('as:{proj/app}:events:streamed') > 0, 'its end gives its events its retention')
  })

  t.test('Redis unreachable: starts anyway, answers 503 fast, comes back by itself', async t => {
    const nowhere = `redis://127.0.0.1:${await refusedPort()}/0`
    const down = new RedisRunStore(nowhere, SETTINGS)
    t.teardown(() => down.close())
    t.equal(down.available, false)
    // refused at once by the connection not made ('not connected'), not after the 1.5 s command deadline ('no answer in time')
    const atOnce = { name: 'RunStoreUnavailableError', reason: 'run store unavailable: not connected' }
    await t.rejects(down.records.get(SCOPE, 'x'), atOnce, 'a read refused at once')
    await t.rejects(down.queue.submit(newRun()), atOnce, 'a submit refused at once')

    const redis = await startPrivateRedis(t)
    const availability: boolean[] = []
    const store = new RedisRunStore(redis.url, SETTINGS)
    t.teardown(() => store.close())
    store.listen(listener({ availability: up => { availability.push(up) } }))
    t.equal(await store.reachable(5000), true)
    await redis.stop()
    await eventually(() => !store.available, 5000)
    await t.rejects(store.records.get(SCOPE, 'x'), RunStoreUnavailableError)
    const blocked = store.queue.take(AbortSignal.timeout(20_000))
    await redis.start()
    await eventually(() => store.available, 10_000)
    const run = newRun()
    await eventually(async () => await store.queue.submit(run).then(() => true, () => false), 5000)
    t.equal((await blocked).runId, run.runId, 'a take waiting through the outage gets the run submitted after it')
    t.same(availability.slice(-2), [false, true])
  })
})
