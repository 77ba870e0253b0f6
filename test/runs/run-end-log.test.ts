import { type Logger, pino } from 'pino'
import t from 'tap'
import { logRunEnd, thisReplica } from '../../src/runs/run-end-log.ts'
import type { RunView } from '../../src/runs/run-data.ts'

function capture (): { logger: Logger, lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = []
  const logger = pino({ base: undefined, timestamp: false }, { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } })
  return { logger, lines }
}

const scope = { projectId: 'p', appName: 'a' }

t.test('a failed run: a warning with its error, its attempt and the replica that ran it; nothing of its request or result', async t => {
  const { logger, lines } = capture()
  const view: RunView = {
    record: {
      run_id: 'r1', status: 'failed', created_at: '2026-11-29T08:00:00.000Z', started_at: '2026-11-29T08:00:01.000Z', completed_at: '2026-11-29T08:00:03.000Z',
      queue_time_ms: 1000, run_time_ms: 2000, status_code: 502, error: { message: 'replica lost' }, attempt: 3
    },
    resultJson: '{"message":"replica lost","secret":"never"}',
    async: true
  }
  logRunEnd(logger, scope, view, 'sidecar-b')
  t.same(lines, [{ level: 40, runId: 'r1', projectId: 'p', appName: 'a', status: 'failed', statusCode: 502, attempt: 3, replica: 'sidecar-b', queueTimeMs: 1000, runTimeMs: 2000, error: 'replica lost', msg: 'run finished' }])
})

t.test('a run canceled in the queue: no times it never had; attempt 1', async t => {
  const { logger, lines } = capture()
  logRunEnd(logger, scope, { record: { run_id: 'q1', status: 'canceled', created_at: 'x', status_code: 499, error: { message: 'run canceled' } }, resultJson: undefined, async: true }, 'none (never run)')
  t.same(lines, [{ level: 40, runId: 'q1', projectId: 'p', appName: 'a', status: 'canceled', statusCode: 499, attempt: 1, replica: 'none (never run)', error: 'run canceled', msg: 'run finished' }])
})

t.test('thisReplica: HOSTNAME when set, else the machine\'s name', async t => {
  t.equal(thisReplica('pod-7'), 'pod-7')
  t.type(thisReplica(undefined), 'string')
  t.not(thisReplica(undefined), '')
})
