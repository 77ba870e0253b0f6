import { performance } from 'node:perf_hooks'
import t, { type Test } from 'tap'
import { RunStoreUnavailableError } from '../../../src/errors.ts'
import { CANCELED_RESULT, recordedRun } from '../../../src/runs/run-record.ts'
import type { KeptAnswer, KeyAnswer, RunEventItem, RunOutcome, RunStatus, RunView, TakenRun } from '../../../src/runs/run-data.ts'
import type { RunRecords } from '../../../src/runs/store/run-records.ts'
import type { RunStore } from '../../../src/runs/store/run-store.ts'
import { type RecordedRun, RecordedRunTee } from '../../../src/runs/stages/recorded-run.ts'
import { WebhookTee } from '../../../src/webhook/webhook-tee.ts'
import type { WebhookTarget } from '../../../src/webhook/webhook-endpoint.ts'
import { countingCounter } from '../../helpers/fake-call.ts'
import { keptWebhooks, memoryStore, SCOPE, storeWith, watchedLogger, watchedReports } from './stage-kit.ts'

const HOOK: WebhookTarget = { url: new URL('https://hook.example/done'), secret: undefined }

/** One write of a run's end the store was asked for, and what it settled with. */
interface Finish { readonly outcome: RunOutcome, readonly keep: KeyAnswer | undefined, readonly done: Promise<RunView> }

interface Recorded {
  readonly store: RunStore
  readonly run: TakenRun
  readonly recorded: RecordedRun
  /** Each end the tee wrote, in order; awaiting one's `done` lets the tee count it first (its callback was there before). */
  readonly finishes: Finish[]
  /** What happened, in order: `webhook` (a delivery handed to the sender), `finish` (the run's end written). */
  readonly order: string[]
  readonly sender: ReturnType<typeof keptWebhooks>
  readonly runsTotal: ReturnType<typeof countingCounter<RunStatus>>
  readonly log: ReturnType<typeof watchedLogger>
  readonly reports: ReturnType<typeof watchedReports>
  /** A webhook tee for the run, its sender `sender`. */
  webhook: (maxBytes?: number) => WebhookTee
}

/**
 * A sync call recorded as a run in the real memory store (with its key's slot `slot`, when given),
 * whose store writes are watched; `records`: methods that replace the store's (given the memory store beneath).
 */
async function recordedCall (t: Test, runId: string, options: { createdAt?: number, webhook?: WebhookTarget, slot?: string, records?: (memory: RunStore) => Partial<RunRecords> } = {}): Promise<Recorded> {
  const memory = await memoryStore(t)
  const finishes: Finish[] = []
  const order: string[] = []
  const sender = keptWebhooks()
  const submit = sender.submit
  sender.submit = job => { order.push('webhook'); return submit(job) }
  const store = storeWith(memory, {
    records: {
      finish: (run: TakenRun, outcome: RunOutcome, keep?: KeyAnswer) => {
        order.push('finish')
        const done = memory.records.finish(run, outcome, keep)
        finishes.push({ outcome, keep, done })
        return done
      },
      ...options.records?.(memory)
    }
  })
  const run = recordedRun({ scope: SCOPE, runId, request: { method: 'POST', path: '/work', headers: [], body: null }, webhook: options.webhook, createdAt: options.createdAt ?? Date.now() })
  if (options.slot === undefined) await memory.records.open(run)
  else t.equal(await memory.keys.claim(SCOPE, options.slot, { runId, digest: 'digest', async: false }, run), undefined, 'the key is claimed')
  const runsTotal = countingCounter<RunStatus>()
  const log = watchedLogger()
  const reports = watchedReports()
  const recorded: RecordedRun = { store, run, logger: log.logger, runsTotal, reportInternal: reports.reportInternal, slot: options.slot }
  const webhook = (maxBytes = 1024): WebhookTee => new WebhookTee(options.webhook ?? HOOK, runId, maxBytes, sender, SCOPE)
  return { store, run, recorded, finishes, order, sender, runsTotal, log, reports, webhook }
}

/** The one end written: its outcome and the record it left. */
async function onlyEnd (t: Test, r: Recorded): Promise<RunView> {
  t.equal(r.finishes.length, 1, 'one end written')
  const view = await (r.finishes[0] as Finish).done
  t.same(await r.store.records.get(SCOPE, r.run.runId), view, 'the record as it ended')
  return view
}

t.test('each event the caller gets is appended to the run as it goes; the end records the status and result the caller got, counted once', async t => {
  const r = await recordedCall(t, 'events-1')
  const tee = new RecordedRunTee(r.recorded, undefined, 1024)
  t.equal(tee.capture, tee, 'the tee is its own capture')
  const follower = (await r.store.records.follow(SCOPE, 'events-1', -1, AbortSignal.timeout(5000)))[Symbol.asyncIterator]()
  tee.forwarded()
  tee.status = 200
  t.equal(tee.status, 200)
  tee.event('one')
  t.same((await follower.next()).value, { type: 'event', n: 0, data: 'one' }, 'a reader sees it live')
  tee.event('{"n":2}')
  t.same((await follower.next()).value, { type: 'event', n: 1, data: '{"n":2}' })
  tee.finish()
  const done = (await follower.next()).value as RunEventItem
  t.equal(done.type, 'done')
  const view = await onlyEnd(t, r)
  t.equal(view.record.status, 'succeeded')
  t.equal(view.record.status_code, 200)
  t.equal(view.record.error, undefined)
  t.equal(view.resultJson, '["one",{"n":2}]', 'the values of the events sent')
  t.type(view.record.run_time_ms, 'number')
  t.same([...r.runsTotal.counts], [['succeeded', 1]])
  t.equal(r.reports.reports.length, 0)
  t.equal(r.log.lines.length, 0)
})

t.test('a body is the result as the caller got it; any status outside 2xx is a failed run, "app answered <status>"', async t => {
  const cases: Array<[number, string[], RunStatus, string, string | undefined]> = [
    [201, ['{"a"', ':1}'], 'succeeded', '{"a":1}', undefined],
    [200, ['plain text'], 'succeeded', '"plain text"', undefined],
    [204, [], 'succeeded', '""', undefined],
    [302, ['moved'], 'failed', '"moved"', 'app answered 302'],
    [404, ['{"message":"no"}'], 'failed', '{"message":"no"}', 'app answered 404'],
    [500, ['boom'], 'failed', '"boom"', 'app answered 500'],
    [199, [''], 'failed', '""', 'app answered 199']
  ]
  for (const [status, chunks, runStatus, resultJson, error] of cases) {
    const r = await recordedCall(t, `body-${status}`)
    const tee = new RecordedRunTee(r.recorded, undefined, 1024)
    tee.forwarded()
    tee.status = status
    for (const chunk of chunks) tee.body(Buffer.from(chunk))
    tee.finish()
    const view = await onlyEnd(t, r)
    t.equal(view.record.status, runStatus, `${status}: ${runStatus}`)
    t.equal(view.record.status_code, status)
    t.equal(view.resultJson, resultJson)
    t.same(view.record.error, error === undefined ? undefined : { message: error })
    t.same([...r.runsTotal.counts], [[runStatus, 1]])
  }
})

t.test('finishWith: the sidecar\'s own answer replaces what was captured; its message is the error; its own 499 "run canceled" is a cancel', async t => {
  const cases: Array<[number, string, RunStatus, string, string]> = [
    [504, '{"message":"request exceeded its deadline of 5s"}', 'failed', '{"message":"request exceeded its deadline of 5s"}', 'request exceeded its deadline of 5s'],
    [502, '{"message":"app unreachable: refused"}', 'failed', '{"message":"app unreachable: refused"}', 'app unreachable: refused'],
    [499, CANCELED_RESULT, 'canceled', CANCELED_RESULT, 'run canceled'],
    [499, '{"message":"caller disconnected"}', 'failed', '{"message":"caller disconnected"}', 'caller disconnected'],
    [500, 'not json', 'failed', '"not json"', 'not json'],
    [502, '{"message":7}', 'failed', '{"message":7}', '{"message":7}']
  ]
  let n = 0
  for (const [status, body, runStatus, resultJson, error] of cases) {
    const r = await recordedCall(t, `with-${++n}`)
    const tee = new RecordedRunTee(r.recorded, undefined, 1024)
    tee.forwarded()
    tee.status = 200
    tee.event('sent before') // replaced by the sidecar's answer
    tee.finishWith(status, body)
    const view = await onlyEnd(t, r)
    t.equal(view.record.status, runStatus, `${status} ${body}: ${runStatus}`)
    t.equal(view.record.status_code, status)
    t.equal(view.resultJson, resultJson)
    t.same(view.record.error, { message: error })
    t.same([...r.runsTotal.counts], [[runStatus, 1]])
  }
})

t.test('cancel (the body refused before the app answered): failed 413 with no result, and no webhook', async t => {
  const r = await recordedCall(t, 'refused-1', { webhook: HOOK })
  const tee = new RecordedRunTee(r.recorded, r.webhook(), 1024)
  tee.cancel()
  const view = await onlyEnd(t, r)
  t.equal(view.record.status, 'failed')
  t.equal(view.record.status_code, 413)
  t.equal(view.resultJson, 'null')
  t.same(view.record.error, { message: 'request body refused' })
  t.equal(r.sender.jobs.length, 0, 'no delivery')
  t.same(view.record.webhook, { status: 'pending', attempts: 0 }, 'the record still says what it was asked')
})

t.test('a run ends once: later ends write nothing and count nothing', async t => {
  const r = await recordedCall(t, 'once-1', { webhook: HOOK })
  const tee = new RecordedRunTee(r.recorded, r.webhook(), 1024)
  tee.forwarded()
  tee.status = 200
  tee.body(Buffer.from('{"first":true}'))
  tee.finish()
  tee.finish()
  tee.finishWith(504, '{"message":"late"}')
  tee.cancel()
  const view = await onlyEnd(t, r)
  t.equal(view.resultJson, '{"first":true}')
  t.same([...r.runsTotal.counts], [['succeeded', 1]])
  t.equal(r.sender.jobs.length, 1, 'one delivery')
  t.same(r.order, ['webhook', 'finish'])
})

t.test('the webhook shares the result and goes first; how its delivery ends is written on the record', async t => {
  let told: ((view: { status: string, attempts: number }) => void) | undefined
  const webhookDone = new Promise<{ status: string, attempts: number }>(resolve => { told = resolve })
  const r = await recordedCall(t, 'hooked-1', {
    webhook: HOOK,
    records: memory => ({
      webhookDone: async (scope, runId, status, attempts) => {
        await memory.records.webhookDone(scope, runId, status, attempts)
        told?.({ status, attempts })
      }
    })
  })
  const webhook = r.webhook()
  const tee = new RecordedRunTee(r.recorded, webhook, 1024)
  t.type(webhook.onEnd, 'function', 'its delivery\'s end is the record\'s')
  tee.forwarded()
  tee.status = 200
  tee.event('a')
  tee.event('b')
  t.equal(webhook.capture.resultJson(), '["a","b"]', 'one capture for both')
  tee.finish()
  t.same(r.order, ['webhook', 'finish'], 'the delivery is handed over before the run\'s end is written')
  const job = r.sender.jobs[0]
  t.match(JSON.parse(job?.body ?? '{}'), { run_id: 'hooked-1', status_code: 200, result: ['a', 'b'] })
  t.same(job?.scope, SCOPE)
  const view = await onlyEnd(t, r)
  t.equal(view.resultJson, '["a","b"]')
  job?.onEnd?.('delivered', 2)
  t.same(await webhookDone, { status: 'delivered', attempts: 2 })
  t.same((await r.store.records.get(SCOPE, 'hooked-1')).record.webhook, { status: 'delivered', attempts: 2 })
})

t.test('finishWith with a webhook: the delivery reports the sidecar\'s answer too; a dropped delivery is recorded failed', async t => {
  let told: (() => void) | undefined
  const webhookDone = new Promise<void>(resolve => { told = resolve })
  const r = await recordedCall(t, 'hooked-2', { webhook: HOOK, records: memory => ({ webhookDone: async (...args) => { await memory.records.webhookDone(...args); told?.() } }) })
  const tee = new RecordedRunTee(r.recorded, r.webhook(), 1024)
  tee.forwarded()
  tee.finishWith(504, '{"message":"request exceeded its deadline of 5s"}')
  t.match(JSON.parse(r.sender.jobs[0]?.body ?? '{}'), { run_id: 'hooked-2', status_code: 504, result: { message: 'request exceeded its deadline of 5s' } })
  r.sender.jobs[0]?.onEnd?.('dropped', 0)
  await webhookDone
  t.same((await r.store.records.get(SCOPE, 'hooked-2')).record.webhook, { status: 'failed', attempts: 0 })
})

t.test('a result larger than maxResultBytes is kept as null; with a webhook, the webhook\'s bound applies', async t => {
  const plain = await recordedCall(t, 'large-1')
  const tee = new RecordedRunTee(plain.recorded, undefined, 8)
  tee.forwarded()
  tee.status = 200
  tee.body(Buffer.from('"12345678"'))
  tee.finish()
  t.equal((await onlyEnd(t, plain)).resultJson, 'null')

  const hooked = await recordedCall(t, 'large-2', { webhook: HOOK })
  const hookedTee = new RecordedRunTee(hooked.recorded, hooked.webhook(64), 8)
  hookedTee.forwarded()
  hookedTee.status = 200
  hookedTee.body(Buffer.from('"12345678"'))
  hookedTee.finish()
  t.equal((await onlyEnd(t, hooked)).resultJson, '"12345678"')
})

t.test('started_at and run_time_ms count from the forwarding, or from `since` for a call recorded after it', async t => {
  const createdAt = Date.now() - 2000
  const r = await recordedCall(t, 'timed-1', { createdAt })
  const tee = new RecordedRunTee(r.recorded, undefined, 1024)
  const before = Date.now()
  tee.forwarded()
  tee.status = 200
  tee.finish()
  const view = await onlyEnd(t, r)
  const startedAt = Date.parse(view.record.started_at as string)
  t.ok(startedAt >= before, 'started as it was forwarded')
  t.equal(view.record.queue_time_ms, startedAt - createdAt)
  t.ok((r.finishes[0]?.outcome.runTimeMs ?? -1) >= 0)
  t.equal(r.finishes[0]?.outcome.startedAt, startedAt)

  const later = await recordedCall(t, 'timed-2', { createdAt })
  const since = { forwardedAt: performance.now() - 500, startedAt: createdAt + 1000 }
  const laterTee = new RecordedRunTee(later.recorded, undefined, 1024, since)
  laterTee.status = 200
  laterTee.finish()
  const laterView = await onlyEnd(t, later)
  t.equal(laterView.record.started_at, new Date(createdAt + 1000).toISOString())
  t.equal(laterView.record.queue_time_ms, 1000)
  t.ok((laterView.record.run_time_ms ?? 0) >= 500, `run_time_ms ${String(laterView.record.run_time_ms)} counts from the forwarding`)
})

t.test('with its key\'s slot and the caller\'s answer, the answer is kept with the run\'s end, in one step (`kept`)', async t => {
  const r = await recordedCall(t, 'keyed-1', { slot: 'slot-1' })
  const answer: KeptAnswer = { status: 200, contentType: 'text/plain', body: Buffer.from('kept') }
  r.recorded.answer = answer
  const tee = new RecordedRunTee(r.recorded, undefined, 1024)
  tee.forwarded()
  tee.status = 200
  tee.body(Buffer.from('kept'))
  tee.finish()
  t.same(r.finishes[0]?.keep, { slot: 'slot-1', answer })
  t.ok(r.recorded.kept instanceof Promise, 'kept: the end written with the answer')
  await r.recorded.kept
  t.same([...r.runsTotal.counts], [['succeeded', 1]], 'counted once kept')
  const entry = await r.store.keys.claim(SCOPE, 'slot-1', { runId: 'keyed-2', digest: 'digest', async: false })
  t.same(entry, { runId: 'keyed-1', digest: 'digest', async: false, answer }, 'a repeat finds the answer')

  const noAnswer = await recordedCall(t, 'keyed-3', { slot: 'slot-3' })
  const noAnswerTee = new RecordedRunTee(noAnswer.recorded, undefined, 1024)
  noAnswerTee.finishWith(502, '{"message":"app unreachable: refused"}')
  t.equal(noAnswer.finishes[0]?.keep, undefined, 'no answer handed over: nothing to keep')
  t.equal(noAnswer.recorded.kept, undefined)

  const noSlot = await recordedCall(t, 'keyed-4')
  noSlot.recorded.answer = answer
  const noSlotTee = new RecordedRunTee(noSlot.recorded, undefined, 1024)
  noSlotTee.finish()
  t.equal(noSlot.finishes[0]?.keep, undefined, 'no slot (a Prefer: wait run): nothing to keep')
  t.equal(noSlot.recorded.kept, undefined)
})

t.test('an event the store throws on: reported once, no more events appended, and the run ends 500 "internal error"', async t => {
  let appends = 0
  const r = await recordedCall(t, 'broken-1', {
    records: () => ({
      appendEvent: () => {
        appends++
        throw new Error('append broke')
      }
    })
  })
  const tee = new RecordedRunTee(r.recorded, undefined, 1024)
  tee.forwarded()
  tee.status = 200
  tee.event('one')
  tee.event('two')
  t.equal(appends, 1, 'not tried again')
  t.equal(r.reports.reports.length, 1)
  t.match(r.reports.reports[0], { error: { message: 'append broke' }, fields: { runId: 'broken-1' } })
  tee.finish()
  const view = await onlyEnd(t, r)
  t.equal(view.record.status, 'failed')
  t.equal(view.record.status_code, 500)
  t.equal(view.resultJson, '{"message":"internal error"}')
  t.same(view.record.error, { message: 'internal error' })
  t.same([...r.runsTotal.counts], [['failed', 1]])
})

t.test('an end the store cannot write is logged and not counted; `kept` settles all the same', async t => {
  const r = await recordedCall(t, 'unwritten-1', {
    slot: 'slot-u',
    records: () => ({ finish: async () => { throw new RunStoreUnavailableError('test: store down') } })
  })
  r.recorded.answer = { status: 200, contentType: undefined, body: Buffer.from('x') }
  const tee = new RecordedRunTee(r.recorded, undefined, 1024)
  const warned = r.log.next()
  tee.finish()
  t.match(await warned, { level: 40, msg: 'run record not finished', runId: 'unwritten-1', err: { message: 'run store unavailable' } })
  await t.resolves(r.recorded.kept as Promise<void>, 'kept does not reject')
  t.equal(r.runsTotal.counts.size, 0)
  t.equal((await r.store.records.get(SCOPE, 'unwritten-1')).record.status, 'running')
})

t.test('an interrupted attempt of a call gone on as a run, attempts left: queued again (retry), no end, no count, no webhook; its end waits for its opening', async t => {
  const retries: Array<{ run: TakenRun, outcome: RunOutcome }> = []
  let answer = true
  const r = await recordedCall(t, 'interrupted-1', {
    webhook: HOOK,
    records: () => ({ retry: async (run, outcome) => { retries.push({ run, outcome }); return answer } })
  })
  let opened: ((run: TakenRun) => void) | undefined
  const opening = new Promise<TakenRun>(resolve => { opened = resolve })
  const recorded: RecordedRun = { ...r.recorded, run: { ...r.run, attempt: 1 }, maxAttempts: 3, opened: opening }
  const tee = new RecordedRunTee(recorded, r.webhook(), 1024)
  tee.finishWith(503, '{"message":"replica stopped"}', 'replica stopped')
  await Promise.resolve()
  t.same(retries, [], 'nothing sent before the run is opened')
  opened?.({ ...r.run, attempt: 1, entry: '1-1' })
  await tee.written
  t.equal(retries.length, 1)
  t.match(retries[0], { run: { entry: '1-1', attempt: 1 }, outcome: { status: 'failed', statusCode: 503, interrupted: 'replica stopped', error: 'replica stopped' } })
  t.same([r.finishes.length, r.sender.jobs.length, [...r.runsTotal.counts]], [0, 0, []], 'no end written, no webhook, nothing counted')
  tee.finish()
  t.equal(r.finishes.length, 0, 'a later end writes nothing')

  // the store could not queue it again (its record changed meanwhile, or none left): it ends as it would have, its interruption listed
  answer = false
  const again = new RecordedRunTee({ ...r.recorded, run: { ...r.run, attempt: 1 }, maxAttempts: 3 }, r.webhook(), 1024)
  again.finishWith(502, '{"message":"app unreachable"}', 'app unreachable')
  await again.written
  const view = await onlyEnd(t, r)
  t.match(r.finishes[0]?.outcome, { statusCode: 502, interrupted: 'app unreachable' })
  t.equal(view.record.status, 'failed')
  t.equal(r.sender.jobs.length, 1, 'its webhook sent at its final outcome')
})

t.test('an interruption of a keyed call (no maxAttempts) is no retry: it ends as it would have', async t => {
  const retries: string[] = []
  const r = await recordedCall(t, 'keyed-stop', { records: () => ({ retry: async run => { retries.push(run.runId); return true } }) })
  const tee = new RecordedRunTee(r.recorded, undefined, 1024)
  tee.finishWith(503, '{"message":"replica stopped"}', 'replica stopped')
  await tee.written
  t.same(retries, [])
  t.match((await onlyEnd(t, r)).record, { status: 'failed', status_code: 503 })
})

t.test('a retry that throws (a bug) is reported once, and the run ends as it would have; one never opened sends its webhook and writes nothing', async t => {
  const r = await recordedCall(t, 'retry-broke', { webhook: HOOK, records: () => ({ retry: async () => { throw new Error('retry broke') } }) })
  const tee = new RecordedRunTee({ ...r.recorded, run: { ...r.run, attempt: 1 }, maxAttempts: 3 }, r.webhook(), 1024)
  tee.finishWith(502, '{"message":"app unreachable"}', 'app unreachable')
  await tee.written
  t.match(r.reports.reports, [{ error: { message: 'retry broke' }, fields: { runId: 'retry-broke' } }])
  t.match((await onlyEnd(t, r)).record, { status: 'failed', status_code: 502 })
  t.equal(r.sender.jobs.length, 1)

  const never = await recordedCall(t, 'never-opened', { webhook: HOOK })
  const refused = Promise.reject(new Error('run id taken'))
  refused.catch(() => {})
  const lost = new RecordedRunTee({ ...never.recorded, run: { ...never.run, attempt: 1 }, maxAttempts: 3, opened: refused }, never.webhook(), 1024)
  lost.finishWith(503, '{"message":"replica stopped"}', 'replica stopped')
  await lost.written
  t.same([never.finishes.length, never.sender.jobs.length, never.reports.reports.length], [0, 1, 0], 'no end written, its webhook sent, nothing reported')
})
