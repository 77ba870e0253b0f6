import t from 'tap'
import {
  CANCELED_MESSAGE, CANCELED_RESULT, CANCELED_STATUS, canceledRecord, finishedRecord, isFinished, queuedRecord,
  nextAttempt, recordJson, REPLICA_LOST, REPLICA_STOPPED, retriedRecord, startedRecord
} from '../../src/runs/run-record.ts'
import type { NewRun, RunOutcome, RunRecord, RunView } from '../../src/runs/run-data.ts'

const CREATED = Date.parse('2030-01-02T03:04:05.006Z')

function newRun (webhook?: NewRun['webhook']): NewRun {
  return {
    scope: { projectId: 'p', appName: 'a' },
    runId: 'run-1',
    request: { method: 'POST', path: '/x', headers: ['x-request-id', 'run-1'], body: null },
    webhook,
    createdAt: CREATED
  }
}

function outcome (fields: Partial<RunOutcome> = {}): RunOutcome {
  return { status: 'succeeded', statusCode: 200, resultJson: '{"ok":true}', runTimeMs: 830.1, error: undefined, completedAt: CREATED + 2000, ...fields }
}

const view = (record: RunRecord, resultJson?: string): RunView => ({ record, resultJson, async: true })

t.test('queuedRecord: queued, created_at; webhook pending with 0 attempts only when one was asked for', async t => {
  const plain = queuedRecord(newRun())
  t.same(plain, { run_id: 'run-1', status: 'queued', created_at: '2030-01-02T03:04:05.006Z' })
  t.same(Object.keys(plain), ['run_id', 'status', 'created_at'])
  const hooked = queuedRecord(newRun({ url: new URL('https://example.com/hook'), secret: 'sekret' }))
  t.same(hooked, { run_id: 'run-1', status: 'queued', created_at: '2030-01-02T03:04:05.006Z', webhook: { status: 'pending', attempts: 0 } })
  t.notOk(JSON.stringify(hooked).includes('sekret'), 'the secret is not in the record')
  t.notOk(JSON.stringify(hooked).includes('example.com'), 'nor is the webhook URL')
})

t.test('startedRecord: running, started_at, queue_time_ms rounded to microseconds; the rest kept', async t => {
  const queued = queuedRecord(newRun({ url: new URL('https://example.com/'), secret: undefined }))
  const started = startedRecord(queued, CREATED - 0.25, CREATED + 12.3456789)
  t.same(started, {
    run_id: 'run-1', status: 'running', created_at: '2030-01-02T03:04:05.006Z', webhook: { status: 'pending', attempts: 0 },
    started_at: '2030-01-02T03:04:05.018Z', queue_time_ms: 12.596
  })
  t.equal(queued.status, 'queued', 'the record given is not changed')
  t.equal(startedRecord(queued, CREATED, CREATED).queue_time_ms, 0)
})

t.test('finishedRecord: status, completed_at, run_time_ms, status_code; error only when the outcome has one', async t => {
  const running = startedRecord(queuedRecord(newRun()), CREATED, CREATED + 10)
  const done = finishedRecord(running, outcome({ runTimeMs: 830.12345 }))
  t.same(done, {
    run_id: 'run-1', status: 'succeeded', created_at: '2030-01-02T03:04:05.006Z', started_at: '2030-01-02T03:04:05.016Z', queue_time_ms: 10,
    completed_at: '2030-01-02T03:04:07.006Z', run_time_ms: 830.123, status_code: 200
  })
  t.notOk('error' in done)
  const failed = finishedRecord(running, outcome({ status: 'failed', statusCode: 504, error: 'request exceeded its deadline of 1s' }))
  t.equal(failed.status, 'failed')
  t.equal(failed.status_code, 504)
  t.same(failed.error, { message: 'request exceeded its deadline of 1s' })
  t.equal(running.status, 'running', 'the record given is not changed')
})

t.test('canceledRecord: a queued run never ran; a running one ends with 499 and {"message":"run canceled"}', async t => {
  const now = CREATED + 5000
  const queued = queuedRecord(newRun({ url: new URL('https://example.com/'), secret: 's' }))
  const fromQueue = canceledRecord(queued, now)
  t.same(fromQueue.record, {
    run_id: 'run-1', status: 'canceled', created_at: '2030-01-02T03:04:05.006Z', webhook: { status: 'pending', attempts: 0 },
    completed_at: '2030-01-02T03:04:10.006Z', error: { message: 'run canceled' }
  })
  t.equal(fromQueue.resultJson, undefined, 'no result')
  t.equal(recordJson(view(fromQueue.record, fromQueue.resultJson)),
    '{"run_id":"run-1","status":"canceled","created_at":"2030-01-02T03:04:05.006Z","completed_at":"2030-01-02T03:04:10.006Z","error":{"message":"run canceled"},"webhook":{"status":"pending","attempts":0}}')

  const running = startedRecord(queuedRecord(newRun()), CREATED, CREATED + 1000)
  const fromRunning = canceledRecord(running, now + 0.5)
  t.same(fromRunning.record, {
    run_id: 'run-1', status: 'canceled', created_at: '2030-01-02T03:04:05.006Z', started_at: '2030-01-02T03:04:06.006Z', queue_time_ms: 1000,
    completed_at: '2030-01-02T03:04:10.006Z', error: { message: 'run canceled' }, run_time_ms: 4000.5, status_code: 499
  })
  t.equal(fromRunning.resultJson, '{"message":"run canceled"}')
  t.equal(recordJson(view(fromRunning.record, fromRunning.resultJson)),
    '{"run_id":"run-1","status":"canceled","created_at":"2030-01-02T03:04:05.006Z","started_at":"2030-01-02T03:04:06.006Z",' +
    '"completed_at":"2030-01-02T03:04:10.006Z","queue_time_ms":1000,"run_time_ms":4000.5,"status_code":499,"result":{"message":"run canceled"},' +
    '"error":{"message":"run canceled"}}', 'the SPEC order, whatever order the fields were set in')
})

t.test('isFinished: succeeded, failed and canceled', async t => {
  const base = queuedRecord(newRun())
  const statuses = ['queued', 'running', 'succeeded', 'failed', 'canceled'] as const
  t.same(statuses.map(status => isFinished({ ...base, status })), [false, false, true, true, true])
})

t.test('recordJson: the SPEC order, absent fields absent, the result spliced in as kept', async t => {
  const queued = queuedRecord(newRun())
  t.equal(recordJson(view(queued)), '{"run_id":"run-1","status":"queued","created_at":"2030-01-02T03:04:05.006Z"}')
  const running = startedRecord(queued, CREATED, CREATED + 12.5)
  t.equal(recordJson(view(running)),
    '{"run_id":"run-1","status":"running","created_at":"2030-01-02T03:04:05.006Z","started_at":"2030-01-02T03:04:05.018Z","queue_time_ms":12.5}')
  const withResult = (resultJson: string): string => recordJson(view(finishedRecord(running, outcome({ resultJson })), resultJson))
  const head = '{"run_id":"run-1","status":"succeeded","created_at":"2030-01-02T03:04:05.006Z","started_at":"2030-01-02T03:04:05.018Z",' +
    '"completed_at":"2030-01-02T03:04:07.006Z","queue_time_ms":12.5,"run_time_ms":830.1,"status_code":200'
  t.equal(withResult('{"b": 2,  "a": [1, 2]}'), head + ',"result":{"b": 2,  "a": [1, 2]}}', 'never parsed and re-serialised')
  t.equal(withResult('"text with \\"quotes\\" and \\n"'), head + ',"result":"text with \\"quotes\\" and \\n"}')
  t.equal(withResult('null'), head + ',"result":null}')
  t.equal(withResult('[]'), head + ',"result":[]}')
  for (const text of [withResult('{"b": 2}'), withResult('null')]) t.doesNotThrow(() => JSON.parse(text), 'valid JSON')

  const failed = finishedRecord(running, outcome({ status: 'failed', statusCode: 502, error: 'app unreachable: "quoted" \\ and \n', resultJson: '{"message":"x"}' }))
  const text = recordJson(view({ ...failed, webhook: { status: 'failed', attempts: 3 } }, '{"message":"x"}'))
  t.same(JSON.parse(text), { ...failed, result: { message: 'x' }, webhook: { status: 'failed', attempts: 3 } }, 'an error message is escaped')
  t.same(Object.keys(JSON.parse(text)), ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'result', 'error', 'webhook'])
  t.match(text, /,"error":\{"message":"app unreachable: \\"quoted\\" \\\\ and \\n"\},"webhook":\{"status":"failed","attempts":3\}\}$/)
})

t.test('attempts: the first counted as it starts; an interrupted one queues the run again with its interruption; the last one ends it', async t => {
  const hook = { url: new URL('https://example.com/'), secret: undefined }
  const queued = queuedRecord(newRun(hook))
  t.equal(nextAttempt(queued), 1)
  const first = startedRecord(queued, CREATED, CREATED + 10, nextAttempt(queued))
  t.same(Object.keys(first), ['run_id', 'status', 'created_at', 'started_at', 'queue_time_ms', 'attempt', 'webhook'], 'attempt before webhook')
  t.equal(first.attempt, 1)
  t.equal(startedRecord(first, CREATED, CREATED + 11).attempt, 1, 'started again without an attempt (its start moved): the same attempt')

  const requeued = retriedRecord(first, 'replica lost', CREATED + 1010)
  t.same(requeued, {
    run_id: 'run-1', status: 'queued', created_at: '2030-01-02T03:04:05.006Z', attempt: 1,
    interruptions: [{ attempt: 1, reason: 'replica lost', at: '2030-01-02T03:04:06.016Z' }], webhook: { status: 'pending', attempts: 0 }
  }, 'queued again: no started_at, queue_time_ms or run_time_ms until the next attempt starts')
  t.equal(nextAttempt(requeued), 2)
  // the first attempt ran 1000 ms (10 to 1010); the second starts at 1510: waits of 10 and 500 ms
  const second = startedRecord(requeued, CREATED, CREATED + 1510, nextAttempt(requeued), 1000)
  t.same({ attempt: second.attempt, queue_time_ms: second.queue_time_ms, started_at: second.started_at }, { attempt: 2, queue_time_ms: 510, started_at: '2030-01-02T03:04:06.516Z' },
    'queue_time_ms counts every wait; started_at the last attempt\'s')
  const done = finishedRecord(second, outcome({ runTimeMs: 42 }))
  t.equal(recordJson(view(done, '{"ok":true}')),
    '{"run_id":"run-1","status":"succeeded","created_at":"2030-01-02T03:04:05.006Z","started_at":"2030-01-02T03:04:06.516Z","completed_at":"2030-01-02T03:04:07.006Z",' +
    '"queue_time_ms":510,"run_time_ms":42,"status_code":200,"result":{"ok":true},"attempt":2,' +
    '"interruptions":[{"attempt":1,"reason":"replica lost","at":"2030-01-02T03:04:06.016Z"}],"webhook":{"status":"pending","attempts":0}}', 'the SPEC order: attempt and interruptions before webhook')

  const cut = finishedRecord(second, outcome({ status: 'failed', statusCode: 503, error: 'replica stopped', interrupted: 'replica stopped', completedAt: CREATED + 3000 }))
  t.same(cut.interruptions, [
    { attempt: 1, reason: 'replica lost', at: '2030-01-02T03:04:06.016Z' }, { attempt: 2, reason: 'replica stopped', at: '2030-01-02T03:04:08.006Z' }
  ], 'the last attempt\'s interruption ends the run, and is listed')
  t.equal(cut.attempt, 2)
  const uncounted = finishedRecord(startedRecord(queued, CREATED, CREATED + 10), outcome({ status: 'failed', statusCode: 502, error: 'x', interrupted: 'app unreachable' }))
  t.same([uncounted.attempt, uncounted.interruptions], [undefined, undefined], 'attempts not counted (RUN_MAX_ATTEMPTS 1): the record as it always was')
  t.same(canceledRecord(requeued, CREATED + 2000).record.interruptions, requeued.interruptions, 'canceled between attempts: its interruptions stay')
})

t.test('the fixed outcomes: canceled 499, replica lost 502, replica stopped 503', async t => {
  t.equal(CANCELED_MESSAGE, 'run canceled')
  t.equal(CANCELED_STATUS, 499)
  t.equal(CANCELED_RESULT, '{"message":"run canceled"}')
  t.same(REPLICA_LOST, { statusCode: 502, message: 'replica lost' })
  t.same(REPLICA_STOPPED, { statusCode: 503, message: 'replica stopped' })
})
