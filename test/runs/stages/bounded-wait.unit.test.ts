import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { AsyncQueueFullError, DeadlineExceededError, QueueFullError, RunIdTakenError, RunNotFoundError, RunStoreUnavailableError } from '../../../src/errors.ts'
import type { StageCall } from '../../../src/call/stage-call.ts'
import { ConcurrencyGate } from '../../../src/lifecycle/concurrency-gate.ts'
import { recordedRun } from '../../../src/runs/run-record.ts'
import type { RunStatus, RunView, TakenRun, RunOutcome } from '../../../src/runs/run-data.ts'
import type { RunStore, RunStoreSettings } from '../../../src/runs/store/run-store.ts'
import { type BoundedWait, createBoundedWait, startBoundedWait, type WatchedRelay } from '../../../src/runs/stages/bounded-wait.ts'
import { createRunSubmit } from '../../../src/runs/stages/submit-run.ts'
import type { AnswerTee } from '../../../src/shared/response-sink.ts'
import { WebhookTee } from '../../../src/webhook/webhook-tee.ts'
import { countingCounter, type FakeCall, type FakeCallOptions, fakeCalls } from '../../helpers/fake-call.ts'
import { patient } from '../../helpers/timing.ts'
import { keptWebhooks, memoryStore, SCOPE, type StoreParts, storeWith, unavailable, watchedLogger, watchedReports } from './stage-kit.ts'

const call = await fakeCalls(t)

const NO_RULES = { dropAuthorization: false, dropAcceptEncoding: false, upgrade: false }
const gateObserver = { inflight: () => {}, queued: () => {} }

/** An open gate of `limit` slots and `queueDepth` waiters. */
function openGate (limit: number, queueDepth: number): ConcurrencyGate {
  const gate = new ConcurrencyGate(limit, queueDepth, gateObserver)
  gate.open()
  return gate
}

interface Setup {
  readonly store: RunStore
  readonly wait: BoundedWait
  /** Each call the async stage was handed, with its `preferenceApplied`. */
  readonly submitted: Array<[StageCall, number | undefined]>
  /** Each run end written, as the store settled it (awaiting one lets the tee count it first). */
  readonly finishes: Array<Promise<RunView>>
  readonly runsTotal: ReturnType<typeof countingCounter<RunStatus>>
  readonly reports: ReturnType<typeof watchedReports>
  readonly log: ReturnType<typeof watchedLogger>
}

/** The bounded wait over the real memory store and the real async stage. */
async function setup (t: Test, options: { settings?: Partial<RunStoreSettings>, parts?: (memory: RunStore) => StoreParts, maxResultBytes?: number, maxAttempts?: number } = {}): Promise<Setup> {
  const memory = await memoryStore(t, options.settings)
  const finishes: Array<Promise<RunView>> = []
  const parts = options.parts?.(memory) ?? {}
  const store = storeWith(memory, {
    ...parts,
    records: {
      finish: (run: TakenRun, outcome: RunOutcome) => {
        const done = memory.records.finish(run, outcome)
        finishes.push(done)
        return done
      },
      ...parts.records
    }
  })
  const submitted: Array<[StageCall, number | undefined]> = []
  const submit = createRunSubmit({ store, basePath: '', headerRules: NO_RULES })
  const runsTotal = countingCounter<RunStatus>()
  const reports = watchedReports()
  const log = watchedLogger()
  const wait = createBoundedWait({
    store,
    submitRun: async (c, preferenceApplied) => {
      submitted.push([c, preferenceApplied])
      return await submit(c, preferenceApplied)
    },
    maxResultBytes: options.maxResultBytes ?? 1024,
    logger: log.logger,
    runsTotal,
    reportInternal: reports.reportInternal,
    maxAttempts: options.maxAttempts
  })
  return { store, wait, submitted, finishes, runsTotal, reports, log }
}

/** A sync call with run id `runId`, its wait armed by hand: `over` ends it. */
async function waiting (runId: string, seconds: number, options: FakeCallOptions = {}): Promise<{ c: FakeCall, over: AbortController }> {
  const c = await call({ ...options, headers: { ...options.headers, 'x-request-id': runId, prefer: `wait=${seconds}` } })
  const over = new AbortController()
  c.waitSeconds = seconds
  c.waitOver = over.signal
  return { c, over }
}

const ranOut = (): Error => new Error('Prefer: wait ran out')
/** The app request of a watched call, as app-forward hands it over. */
const SENT = { method: 'POST', path: '/hold/slow?x=1', headers: ['x-request-id', 'slow-1'] }

/** A relay as the forward stage made it: forwarded `msAgo`; how often it was asked to go on as a run, its answer, and what it was handed once it said yes. */
function relayOf (msAgo: number, answer: () => boolean = () => true): WatchedRelay & { readonly asked: number, readonly handed: Array<{ tee: AnswerTee }> } {
  const handed: Array<{ tee: AnswerTee }> = []
  let asked = 0
  return {
    handed,
    get asked () { return asked },
    forwardedAt: performance.now() - msAgo,
    outliveAsRun: makeTee => {
      asked++
      if (!answer()) return false
      handed.push({ tee: makeTee() })
      return true
    }
  }
}

const iso = (performanceMs: number): string => new Date(Math.round(performance.timeOrigin + performanceMs)).toISOString()

t.test('startBoundedWait: Prefer: wait=<1 to 3600> (quoted or not, among other preferences) arms the wait; any other value is ignored', async t => {
  const cases: Array<[string, number | undefined]> = [
    ['wait=5', 5],
    ['wait=1', 1],
    ['wait=3600', 3600],
    ['wait="7"', 7],
    ['WAIT=9', 9],
    ['wait = 8', 8],
    ['wait=0005', 5],
    ['handling=lenient, wait=10', 10],
    ['handling=lenient,wait=11,return=minimal', 11],
    ['wait=12; foo=bar', 12],
    ['wait=13, respond-async', 13],
    ['wait=0', undefined],
    ['wait=3601', undefined],
    ['wait=9999', undefined],
    ['wait=10000', undefined],
    ['wait=-1', undefined],
    ['wait=1.5', undefined],
    ['wait=abc', undefined],
    ['wait=', undefined],
    ['wait', undefined],
    ['wait="7', undefined],
    ['wait=7"', undefined],
    ["wait='7'", undefined],
    ['wait=10x', undefined],
    ['await=10', undefined],
    ['x-wait=10', undefined],
    ['handling=lenient', undefined],
    ['', undefined]
  ]
  for (const [prefer, seconds] of cases) {
    const c = await call({ headers: { prefer } })
    startBoundedWait(c)
    t.equal(c.waitSeconds, seconds, JSON.stringify(prefer))
    t.equal(c.waitOver === undefined, seconds === undefined, `${JSON.stringify(prefer)}: ${seconds === undefined ? 'no' : 'a'} signal`)
    t.equal(c.waitOver?.aborted, seconds === undefined ? undefined : false)
    c.close() // its timer goes with it
  }
  const listed = await call({ headers: { prefer: 'handling=lenient' } })
  listed.req.headers.prefer = ['handling=lenient', 'wait=3'] // Prefer sent twice, as a list
  startBoundedWait(listed)
  t.equal(listed.waitSeconds, 3, 'a list of Prefer headers')
  listed.close()
})

t.test('startBoundedWait: no wait for a call without Prefer, an async call, or a keyed one (a recorded run already)', async t => {
  const plain = await call({})
  startBoundedWait(plain)
  t.equal(plain.waitOver, undefined)
  const async = await call({ headers: { prefer: 'respond-async, wait=5' } })
  async.async = true
  startBoundedWait(async)
  t.equal(async.waitOver, undefined, 'async')
  t.equal(async.waitSeconds, undefined)
  const keyed = await call({ headers: { prefer: 'wait=5', 'idempotency-key': 'k' } })
  keyed.idempotencyKey = 'k'
  startBoundedWait(keyed)
  t.equal(keyed.waitOver, undefined, 'keyed')
  t.equal(keyed.waitSeconds, undefined)
})

t.test('startBoundedWait: the wait runs out `seconds` after the call arrived', async t => {
  const c = await call({ headers: { prefer: 'wait=1' } })
  startBoundedWait(c)
  const over = c.waitOver as AbortSignal
  await once(over, 'abort')
  const waited = performance.now() - c.arrivedAt
  t.ok(waited >= 990, `ran out after ${Math.round(waited)} ms`) // timers count whole milliseconds of libuv's clock, not performance.now()'s
  t.equal((over.reason as Error).message, 'Prefer: wait ran out')

  // a wait of a minute, so that one counted from now, not the arrival, is far past the scaled bounds below
  const late = await call({ headers: { prefer: 'wait=60' } })
  Object.defineProperty(late, 'arrivedAt', { value: performance.now() - 59_900 }) // it arrived 59.9 s ago (a slow body, a store round trip)
  const started = performance.now()
  startBoundedWait(late)
  await once(late.waitOver as AbortSignal, 'abort')
  t.ok(performance.now() - started < patient(900), 'the time it already spent counts: not a minute from now')

  const spent = await call({ headers: { prefer: 'wait=60' } })
  Object.defineProperty(spent, 'arrivedAt', { value: performance.now() - 120_000 })
  startBoundedWait(spent)
  t.equal(spent.waitOver?.aborted, false, 'never synchronously')
  const spentFrom = performance.now()
  await once(spent.waitOver as AbortSignal, 'abort')
  t.ok(performance.now() - spentFrom < patient(500), 'a wait already spent runs out at once (its timer set to 0), not a minute from now')
  for (const done of [c, late, spent]) done.close()
})

t.test('startBoundedWait: a call that closes first clears its timer', async t => {
  const c = await call({ headers: { prefer: 'wait=1' } })
  startBoundedWait(c)
  c.close()
  // a timer set after the wait's, and longer, fires after the wait's would have
  await new Promise(resolve => setTimeout(resolve, 1050))
  t.equal(c.waitOver?.aborted, false)
})

t.test('takeSlotWithin, a plain call: the gate\'s slot with no promise when one is free; its wait, or its 503, when not', async t => {
  const { wait } = await setup(t)
  const gate = openGate(1, 1)
  const waits: Array<[string, number]> = []
  const first = await call({})
  first.waited = ms => { waits.push(['first', ms]) }
  t.equal(wait.takeSlotWithin(gate, first), false, 'a free slot: false, not a promise')
  t.equal(gate.inflight, 1)
  t.same(waits, [['first', 0]], 'told it waited 0 ms')

  const second = await call({})
  second.waited = ms => { waits.push(['second', ms]) }
  const slot = wait.takeSlotWithin(gate, second)
  t.type(slot, Promise, 'it waits')
  t.equal(gate.waiting, 1)
  const third = await call({})
  t.throws(() => wait.takeSlotWithin(gate, third), QueueFullError, 'the queue is full: 503')
  first.close() // frees its slot
  t.equal(await slot, false)
  t.equal(gate.inflight, 1, 'the slot went to the waiting call')
  t.equal(waits.length, 2)
  t.equal(waits[1]?.[0], 'second', 'told how long it waited')
  second.close()
  t.equal(gate.inflight, 0, 'freed as the call closes')
})

t.test('takeSlotWithin, a call with a wait: a free slot is taken (false), and the async stage is not asked', async t => {
  const { wait, submitted } = await setup(t)
  const gate = openGate(1, 1)
  const { c } = await waiting('free-1', 5)
  t.equal(await wait.takeSlotWithin(gate, c), false)
  t.equal(gate.inflight, 1)
  t.equal(submitted.length, 0)
  c.close()
  t.equal(gate.inflight, 0)

  const ranOutFirst = await waiting('free-2', 5)
  ranOutFirst.over.abort(ranOut()) // ran out before the gate (a slow body): a free slot is still taken, and the call goes on as a run at the app
  t.equal(await wait.takeSlotWithin(gate, ranOutFirst.c), false)
  t.equal(gate.inflight, 1)
  t.equal(submitted.length, 0)
  ranOutFirst.c.close()
})

t.test('takeSlotWithin: the wait runs out while the call waits for a slot: it leaves the gate, is queued as an async run and answered 202 queued', async t => {
  const { store, wait, submitted } = await setup(t)
  const gate = openGate(1, 4)
  const holder = await call({})
  t.equal(wait.takeSlotWithin(gate, holder), false)
  const { c, over } = await waiting('queued-1', 4, { body: '{"job":1}' })
  c.body = c.req
  const slot = wait.takeSlotWithin(gate, c)
  t.equal(gate.waiting, 1)
  over.abort(ranOut())
  t.equal(await slot, true, 'answered')
  t.equal(gate.waiting, 0, 'it left the gate')
  t.equal(gate.inflight, 1, 'the holder\'s only')
  t.same(submitted.map(([queued, seconds]) => [queued.runId, seconds]), [['queued-1', 4]])
  const got = await c.got
  t.equal(got?.status, 202)
  t.equal(got?.body, '{"run_id":"queued-1","status":"queued"}')
  t.equal(got?.headers['preference-applied'], 'wait=4')
  t.equal(got?.headers.location, '/v4/proj/app/_runs/queued-1')
  t.equal(got?.headers['x-request-id'], 'queued-1')
  const taken = await store.queue.take(AbortSignal.timeout(5000))
  t.equal(taken.runId, 'queued-1')
  t.equal(taken.request.body?.toString(), '{"job":1}', 'run once, as an async run')
  holder.close()
})

t.test('takeSlotWithin: Prefer: wait=1 armed by startBoundedWait, behind a full gate: 202 queued after a second', async t => {
  const { wait, submitted } = await setup(t)
  const gate = openGate(1, 4)
  const holder = await call({})
  t.equal(wait.takeSlotWithin(gate, holder), false)
  const c = await call({ headers: { prefer: 'wait=1', 'x-request-id': 'timed-1' } })
  startBoundedWait(c)
  t.equal(await wait.takeSlotWithin(gate, c), true)
  t.ok(performance.now() - c.arrivedAt >= 990, 'after its wait')
  t.equal(submitted.length, 1)
  const got = await c.got
  t.equal(got?.status, 202)
  t.equal(got?.headers['preference-applied'], 'wait=1')
  c.close()
  holder.close()
})

t.test('takeSlotWithin: a wait already run out behind a full gate is queued at once, never waiting', async t => {
  const { wait, submitted } = await setup(t)
  const gate = openGate(1, 0) // no room to wait either: the run-out wait goes before the queue's bound
  const holder = await call({})
  t.equal(wait.takeSlotWithin(gate, holder), false)
  const { c, over } = await waiting('at-once-1', 2)
  over.abort(ranOut())
  t.equal(await wait.takeSlotWithin(gate, c), true)
  t.equal(gate.waiting, 0)
  t.equal(submitted.length, 1)
  t.equal((await c.got)?.headers['preference-applied'], 'wait=2')
  holder.close()
})

t.test('takeSlotWithin: what is not the wait running out is the call\'s refusal: a full queue (503), a caller gone, both at once', async t => {
  const { wait, submitted } = await setup(t)
  const gate = openGate(1, 1)
  const holder = await call({})
  t.equal(wait.takeSlotWithin(gate, holder), false)
  const first = await waiting('refused-1', 5)
  const firstSlot = Promise.resolve(wait.takeSlotWithin(gate, first.c))
  const full = await waiting('refused-2', 5)
  await t.rejects(async () => await wait.takeSlotWithin(gate, full.c), QueueFullError, 'the queue is full: 503, not a run')

  const gone = new Error('caller gone')
  first.c.leave(gone)
  await t.rejects(firstSlot, gone, 'its caller left: the abort reason')
  t.equal(gate.waiting, 0)

  const both = await waiting('refused-3', 5)
  const bothSlot = Promise.resolve(wait.takeSlotWithin(gate, both.c))
  const left = new Error('caller gone too')
  both.c.leave(left)
  both.over.abort(ranOut())
  await t.rejects(bothSlot, left, 'a caller gone as its wait ran out is not queued')
  t.equal(submitted.length, 0, 'the async stage was never asked')
  holder.close()
})

t.test('takeSlotWithin: an async queue that refuses the run: the call gets its refusal (503)', async t => {
  const { wait, submitted } = await setup(t, { settings: { queueDepth: 0 } })
  const gate = openGate(1, 1)
  const holder = await call({})
  t.equal(wait.takeSlotWithin(gate, holder), false)
  const { c, over } = await waiting('no-room-1', 3)
  const slot = Promise.resolve(wait.takeSlotWithin(gate, c))
  over.abort(ranOut())
  await t.rejects(slot, AsyncQueueFullError)
  t.equal(submitted.length, 1)
  t.notOk(c.res.headersSent, 'the pipeline answers it')
  holder.close()
})

t.test('watch: a call without a wait is not watched', async t => {
  const { wait } = await setup(t)
  const c = await call({})
  const relay = relayOf(0)
  wait.watch(c, relay, undefined, SENT)
  c.abort(ranOut())
  t.equal(relay.handed.length, 0)
})

t.test('watch: the wait runs out at the app: recorded running, 202 running; the app\'s answer becomes the run\'s result, its webhook sent', async t => {
  const { store, wait, finishes, runsTotal } = await setup(t)
  const sender = keptWebhooks()
  const hook = { url: new URL('https://hook.example/done'), secret: 's3cret' }
  const { c, over } = await waiting('slow-1', 3, { path: '/v4/proj/app/hold/slow?x=1' })
  c.webhook = hook
  const relay = relayOf(250)
  const webhookTee = new WebhookTee(hook, 'slow-1', 1024, sender, SCOPE)
  wait.watch(c, relay, webhookTee, SENT)
  t.equal(relay.handed.length, 0, 'nothing while the wait lasts')
  over.abort(ranOut())
  t.equal(relay.handed.length, 1, 'the app request goes on as a run')
  t.ok(c.outliving, 'the call holds what it holds until the app answers')
  const { tee } = relay.handed[0] as { tee: AnswerTee }

  const got = await c.got
  t.equal(got?.status, 202)
  t.equal(got?.body, '{"run_id":"slow-1","status":"running"}')
  t.equal(got?.headers['preference-applied'], 'wait=3')
  t.equal(got?.headers.location, '/v4/proj/app/_runs/slow-1')
  t.equal(got?.headers['x-request-id'], 'slow-1')
  const running = await store.records.get(SCOPE, 'slow-1')
  t.equal(running.async, false)
  t.same(running.record, {
    run_id: 'slow-1',
    status: 'running',
    created_at: iso(c.arrivedAt),
    started_at: iso(relay.forwardedAt),
    queue_time_ms: Date.parse(iso(relay.forwardedAt)) - Date.parse(iso(c.arrivedAt)),
    webhook: { status: 'pending', attempts: 0 }
  }, 'created as it arrived, started as it was forwarded')

  tee.capture.status = 200
  tee.capture.body(Buffer.from('{"answer":42}'))
  tee.finish()
  t.equal(finishes.length, 1)
  const view = await (finishes[0] as Promise<RunView>)
  t.equal(view.record.status, 'succeeded')
  t.equal(view.record.status_code, 200)
  t.equal(view.resultJson, '{"answer":42}')
  t.ok((view.record.run_time_ms ?? 0) >= 250, 'run time counts from the forwarding')
  t.same([...runsTotal.counts], [['succeeded', 1]])
  t.equal(sender.jobs.length, 1)
  t.match(JSON.parse(sender.jobs[0]?.body ?? '{}'), { run_id: 'slow-1', status_code: 200, result: { answer: 42 } })
  c.close()
})

t.test('watch: a wait that ran out between the slot and the forwarding goes on as a run at once; the result is bounded by maxResultBytes', async t => {
  const { store, wait, finishes } = await setup(t, { maxResultBytes: 4 })
  const { c, over } = await waiting('between-1', 2)
  over.abort(ranOut())
  const relay = relayOf(0)
  wait.watch(c, relay, undefined, SENT)
  t.equal(relay.handed.length, 1)
  t.equal((await c.got)?.body, '{"run_id":"between-1","status":"running"}')
  t.equal((await store.records.get(SCOPE, 'between-1')).record.status, 'running')
  const { tee } = relay.handed[0] as { tee: AnswerTee }
  tee.capture.status = 200
  tee.capture.body(Buffer.from('"12345"'))
  tee.finish()
  t.equal((await (finishes[0] as Promise<RunView>)).resultJson, 'null', 'past maxResultBytes: no result kept')
})

t.test('watch: nothing happens to a call already answered, one whose response has begun, or one whose relay will not let it go', async t => {
  const { store, wait } = await setup(t)
  const answered = await waiting('answered-1', 2)
  const answeredRelay = relayOf(0)
  wait.watch(answered.c, answeredRelay, undefined, SENT)
  answered.c.answer(new DeadlineExceededError(2))
  answered.over.abort(ranOut())
  t.equal(answeredRelay.handed.length, 0, 'answered: left alone')
  t.equal((await answered.c.got)?.status, 504)

  const begun = await waiting('begun-1', 2)
  const begunRelay = relayOf(0)
  wait.watch(begun.c, begunRelay, undefined, SENT)
  begun.c.out.writeHead(200, { 'content-type': 'text/event-stream' })
  begun.c.out.write('data: 1\n\n')
  begun.over.abort(ranOut())
  t.equal(begunRelay.handed.length, 0, 'its stream has begun: it goes on to the caller')
  t.notOk(begun.c.outliving)
  begun.c.out.end('data: 2\n\n')
  const got = await begun.c.got
  t.equal(got?.status, 200)
  t.equal(got?.body, 'data: 1\n\ndata: 2\n\n')

  const refused = await waiting('refused-1', 2)
  const refusedRelay = relayOf(0, () => false)
  wait.watch(refused.c, refusedRelay, undefined, SENT)
  refused.over.abort(ranOut())
  t.equal(refusedRelay.asked, 1, 'asked')
  t.equal(refusedRelay.handed.length, 0, 'no tee made')
  t.notOk(refused.c.outliving, 'the relay said no: the call is the caller\'s still')
  t.notOk(refused.c.res.headersSent, 'no 202')
  await t.rejects(store.records.get(SCOPE, 'refused-1'), RunNotFoundError, 'nothing recorded')
  for (const done of [answered.c, begun.c, refused.c]) done.close()
})

// A relay that refuses (an envelope still reading the app's body, an app request that ended or
// expired) keeps the call a plain one: no tee is made, so its webhook reports to no run (none was opened).
t.test('watch: a relay that will not let the call go leaves its webhook a plain call\'s', async t => {
  const { wait } = await setup(t)
  const sender = keptWebhooks()
  const hook = { url: new URL('https://hook.example/plain'), secret: undefined }
  const { c, over } = await waiting('plain-hook-1', 2)
  c.webhook = hook
  const webhookTee = new WebhookTee(hook, 'plain-hook-1', 1024, sender, SCOPE)
  const relay = relayOf(0, () => false)
  wait.watch(c, relay, webhookTee, SENT)
  over.abort(ranOut())
  t.equal(relay.asked, 1, 'the relay was asked')
  t.equal(webhookTee.onEnd, undefined, 'the webhook reports to no run')
  c.close()
})

t.test('watch: a run that cannot be recorded: the caller gets the store\'s refusal (503, 409); the app request goes on', async t => {
  const down = await setup(t, { parts: () => ({ records: { open: unavailable } }) })
  const { c, over } = await waiting('down-1', 2)
  const relay = relayOf(0)
  down.wait.watch(c, relay, undefined, SENT)
  over.abort(ranOut())
  const got = await c.got
  t.equal(got?.status, 503)
  t.equal(got?.body, '{"message":"run store unavailable"}')
  t.equal(got?.headers['retry-after'], '1')
  t.equal(got?.headers['x-request-id'], 'down-1')
  t.type(c.answered[0], RunStoreUnavailableError)
  t.ok(c.outliving, 'its app request goes on (unrecorded), holding its slot')
  t.equal(relay.handed.length, 1)

  const { store, wait } = await setup(t)
  await store.records.open(recordedRun({ scope: SCOPE, runId: 'taken-1', request: { method: 'POST', path: '/work', headers: [], body: null }, webhook: undefined, createdAt: Date.now() }))
  const taken = await waiting('taken-1', 2)
  wait.watch(taken.c, relayOf(0), undefined, SENT)
  taken.over.abort(ranOut())
  const takenGot = await taken.c.got
  t.equal(takenGot?.status, 409)
  t.type(taken.c.answered[0], RunIdTakenError)
  c.close()
  taken.c.close()
})

t.test('watch: a call answered while its run was being recorded gets no 202 on top', async t => {
  let opened: (() => void) | undefined
  let asked: (() => void) | undefined
  const open = new Promise<void>(resolve => { opened = resolve })
  const openAsked = new Promise<void>(resolve => { asked = resolve })
  const { store, wait, reports } = await setup(t, {
    parts: memory => ({
      records: {
        open: async run => {
          asked?.()
          await open
          return await memory.records.open(run)
        }
      }
    })
  })
  const { c, over } = await waiting('raced-1', 2)
  wait.watch(c, relayOf(0), undefined, SENT)
  over.abort(ranOut())
  await openAsked
  c.answer(new DeadlineExceededError(2)) // its deadline passed meanwhile
  opened?.()
  const got = await c.got
  t.equal(got?.status, 504)
  t.equal((await store.records.get(SCOPE, 'raced-1')).record.status, 'running')
  await new Promise(resolve => setImmediate(resolve)) // past the stage's last step
  t.equal(reports.reports.length, 0, 'no write after the end')
  c.close()
})

t.test('watch: an exception as the call goes on as a run is reported, with its run id', async t => {
  const { wait, reports } = await setup(t)
  const { c, over } = await waiting('thrown-1', 2)
  wait.watch(c, relayOf(0, () => { throw new Error('relay broke') }), undefined, SENT)
  const reported = reports.next()
  over.abort(ranOut())
  t.match(await reported, { message: 'relay broke' })
  t.same(reports.reports[0]?.fields, { runId: 'thrown-1' })
  c.close()
})

t.test('RUN_MAX_ATTEMPTS above 1: a watched call is sent as attempt 1; with a store that queues runs again, its body is read whole first and its request kept as it went', async t => {
  const opened: TakenRun[] = []
  const { wait } = await setup(t, {
    maxAttempts: 3,
    parts: memory => ({
      queue: { shared: true },
      records: { retry: async () => true, open: async run => { opened.push(run); return await memory.records.open(run) } }
    })
  })
  const { c, over } = await waiting('kept-1', 3, { body: 'the input' })
  c.body = c.req // as the request stage leaves a body that streams
  const gate = openGate(1, 1)
  t.equal(await wait.takeSlotWithin(gate, c), false, 'a slot')
  t.same(c.body, Buffer.from('the input'), 'read whole before it goes')
  const relay = relayOf(0)
  t.same(wait.watch(c, relay, undefined, SENT), [...SENT.headers, 'x-run-attempt', '1'], 'X-Run-Attempt: 1 on the call')
  over.abort(ranOut())
  await c.got
  t.equal(opened.length, 1)
  t.match(opened[0], { runId: 'kept-1', attempt: 1, running: { attempt: 1 }, request: { method: 'POST', path: '/hold/slow?x=1', headers: SENT.headers, body: Buffer.from('the input') } })
  c.close()
})

t.test('RUN_MAX_ATTEMPTS above 1 with a store that never queues a run again (memory): attempt 1 on the call and its record, no request kept', async t => {
  const opened: TakenRun[] = []
  const { wait } = await setup(t, { maxAttempts: 3, parts: memory => ({ records: { open: async run => { opened.push(run); return await memory.records.open(run) } } }) })
  const { c, over } = await waiting('memory-1', 3)
  t.same(wait.watch(c, relayOf(0), undefined, SENT), [...SENT.headers, 'x-run-attempt', '1'])
  over.abort(ranOut())
  await c.got
  t.match(opened[0], { attempt: 1, running: { attempt: 1 }, request: { headers: [], body: null } })
  c.close()
})

t.test('RUN_MAX_ATTEMPTS 1: the headers as they are, no attempt', async t => {
  const { wait } = await setup(t)
  const { c } = await waiting('once-1', 3)
  const headers = wait.watch(c, relayOf(0), undefined, SENT)
  t.equal(headers, SENT.headers)
  c.close()
})
