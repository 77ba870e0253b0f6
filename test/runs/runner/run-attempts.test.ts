import t from 'tap'
import type { RunEventItem, RunOutcome, TakenRun } from '../../../src/runs/run-data.ts'
import { retriedAttempt, withAttempt } from '../../../src/runs/runner/run-attempts.ts'
import { RedisRunStore } from '../../../src/runs/store/redis/redis-run-store.ts'
import type { RunRecords } from '../../../src/runs/store/run-records.ts'
import { flushRedis, testRedis } from '../../helpers/redis-server.ts'
import { ended, itemsOf, memoryStore, newRun, runnerKit, scope, submit, testApp, within, type RunnerKit } from './runner-kit.ts'

// The runner's side of attempts (docs/runs.md, "Running on interruptible capacity"): the app told
// the attempt, an interrupted one handed back to a store that queues runs again, the next one's
// events numbered after the attempts before; two runners on one Redis play two replicas.

t.test('withAttempt: X-Run-Attempt added, any the caller sent replaced; not counting, the headers as they are', async t => {
  const headers = ['content-type', 'application/json', 'X-Run-Attempt', '9', 'x-request-id', 'r1']
  t.equal(withAttempt(headers, undefined), headers, 'the same list')
  t.same(withAttempt(headers, 2), ['content-type', 'application/json', 'x-request-id', 'r1', 'x-run-attempt', '2'])
  t.same(withAttempt([], 1), ['x-run-attempt', '1'])
})

t.test('retriedAttempt: only an interrupted attempt with attempts left, with a store that queues runs again', async t => {
  const asked: TakenRun[] = []
  const records = { retry: async (run: TakenRun) => { asked.push(run); return true } } as unknown as RunRecords
  const run = { ...newRun({ runId: 'r1' }), entry: '', attempt: 1 } satisfies TakenRun
  const interrupted: RunOutcome = { status: 'failed', statusCode: 502, resultJson: '{}', runTimeMs: 1, error: 'app unreachable', completedAt: 1, interrupted: 'app unreachable' }
  t.equal(await retriedAttempt(records, run, { ...interrupted, interrupted: undefined }, 3), false, 'an answer, a deadline, a cancel')
  t.equal(await retriedAttempt(records, { ...run, attempt: 3 }, interrupted, 3), false, 'its last attempt')
  t.equal(await retriedAttempt(records, { ...run, attempt: undefined }, interrupted, 3), false, 'attempts not counted')
  t.equal(await retriedAttempt({} as RunRecords, run, interrupted, 3), false, 'a store that does not queue runs again (memory)')
  t.same(asked, [])
  t.equal(await retriedAttempt(records, run, interrupted, 3), true)
  t.same(asked, [run])
})

t.test('in memory, RUN_MAX_ATTEMPTS 3: the app gets X-Run-Attempt: 1, the record attempt 1; never run again', async t => {
  const app = await testApp(t, request => { request.res.writeHead(200, { 'content-type': 'application/json' }).end('{}') })
  const kit = await runnerKit(t, app, { store: await memoryStore(t, { maxAttempts: 3 }), maxAttempts: 3 })
  await submit(kit.store, { runId: 'm1', headers: ['x-request-id', 'm1', 'X-Run-Attempt', '7'] })
  const { rawHeaders } = await app.arrived(1)
  const attempts = rawHeaders.flatMap((value, i) => i % 2 === 0 && value.toLowerCase() === 'x-run-attempt' ? [value, rawHeaders[i + 1]] : [])
  t.same(attempts, ['x-run-attempt', '1'], 'one, the sidecar\'s')
  t.match((await ended(kit.store, 'm1')).record, { status: 'succeeded', attempt: 1 })
  const plain = await runnerKit(t, app, { store: await memoryStore(t) })
  await submit(plain.store, { runId: 'm2' })
  t.equal((await app.arrived(2)).headers['x-run-attempt'], undefined, 'RUN_MAX_ATTEMPTS 1: no header')
  t.equal((await ended(plain.store, 'm2')).record.attempt, undefined)
})

t.test('two runners on one Redis, RUN_MAX_ATTEMPTS 3', async t => {
  const redisUrl = await testRedis(t)
  if (redisUrl === undefined) return
  await flushRedis(redisUrl)
  const settings = { retentionSeconds: 60, maxEvents: 100, maxEventBytes: 1 << 20, queueDepth: 100, queueMaxBytes: 1 << 20, maxAttempts: 3, scope }
  const replica = async (name: string, answer: Parameters<typeof testApp>[1]): Promise<{ kit: RunnerKit, app: Awaited<ReturnType<typeof testApp>> }> => {
    const store = new RedisRunStore(redisUrl, settings, { consumer: name })
    await store.reachable(5000)
    const app = await testApp(t, answer)
    const kit = await runnerKit(t, app, { store, maxAttempts: 3, start: false })
    t.teardown(async () => { await store.close() })
    return { kit, app }
  }
  // A's app dies holding its request (before any answer); B's streams three NDJSON events
  const a = await replica('a', request => { request.res.destroy() })
  const b = await replica('b', request => {
    request.res.writeHead(200, { 'content-type': 'application/x-ndjson' })
    for (let step = 0; step < 3; step++) request.res.write(`{"attempt":${String(request.headers['x-run-attempt'])},"step":${step}}\n`)
    request.res.end()
  })
  await submit(a.kit.store, { runId: 'moved', webhook: { url: new URL('http://127.0.0.1:9/hook'), secret: 's' } })
  a.kit.runner.start()
  const first = await a.app.arrived(1)
  t.equal(first.headers['x-run-attempt'], '1')
  const queuedAgain = await within((async () => {
    for (;;) {
      const { record } = await a.kit.store.records.get(scope, 'moved')
      if (record.status === 'queued' && record.attempt === 1) return record
      await new Promise(resolve => setTimeout(resolve, 10))
    }
  })(), 'queued again after attempt 1')
  t.match(queuedAgain.interruptions, [{ attempt: 1, reason: 'app unreachable' }])
  b.kit.runner.start()
  const second = await b.app.arrived(1)
  t.same([second.headers['x-run-attempt'], second.headers['x-request-id'], second.url, second.body.toString()], ['2', 'moved', '/work', '{"n":1}'], 'the same request, attempt 2')
  const items = await itemsOf(b.kit.store, 'moved')
  t.same(items.slice(0, -1), [
    { type: 'event', n: 0, data: '{"attempt":2,"reason":"app unreachable"}', event: 'retry' },
    { type: 'event', n: 1, data: '{"attempt":2,"step":0}' },
    { type: 'event', n: 2, data: '{"attempt":2,"step":1}' },
    { type: 'event', n: 3, data: '{"attempt":2,"step":2}' }
  ] satisfies RunEventItem[], 'the retry event, then the second attempt\'s events after it')
  const done = (items.at(-1) as RunEventItem & { type: 'done' }).view
  t.match(done.record, { status: 'succeeded', status_code: 200, attempt: 2, interruptions: [{ attempt: 1, reason: 'app unreachable' }] })
  t.equal(done.resultJson, '[{"attempt":2,"step":0},{"attempt":2,"step":1},{"attempt":2,"step":2}]', 'the last attempt\'s answer')
  t.equal(a.app.requests.length, 1, 'A\'s app saw attempt 1 only')
  t.equal(a.kit.webhooks.submitted.length + a.kit.webhooks.held.length, 0, 'no webhook for the interrupted attempt')
  t.equal(b.kit.webhooks.submitted.length + b.kit.webhooks.held.length, 1, 'one, at the end')
  t.same(Object.fromEntries(a.kit.runsTotal.counts), {}, 'not counted as ended where it was interrupted')
  t.same(Object.fromEntries(b.kit.runsTotal.counts), { succeeded: 1 })
})
