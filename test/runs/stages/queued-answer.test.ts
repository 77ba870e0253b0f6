import t from 'tap'
import { answerQueued, answerWaitRanOut, queuedBody, runLocation } from '../../../src/runs/stages/queued-answer.ts'
import { fakeCalls } from '../../helpers/fake-call.ts'

const call = await fakeCalls(t)
const route = { projectId: 'p1', appName: 'a1' }

t.test('queuedBody and runLocation name the run', async t => {
  t.equal(queuedBody('r"1'), '{"run_id":"r\\"1","status":"queued"}')
  t.equal(runLocation({ ...route } as Parameters<typeof runLocation>[0], 'r-1'), '/v4/p1/a1/_runs/r-1')
})

t.test('answerQueued: 202, the run id, Location; a replay says so', async t => {
  const first = await call({ path: '/v4/p1/a1/work' })
  answerQueued(first.res, first.route, 'run-1', false)
  const got = await first.got
  t.equal(got?.status, 202)
  t.equal(got?.body, '{"run_id":"run-1","status":"queued"}')
  t.equal(got?.headers['x-request-id'], 'run-1')
  t.equal(got?.headers.location, '/v4/p1/a1/_runs/run-1')
  t.equal(got?.headers['content-type'], 'application/json; charset=utf-8')
  t.equal(got?.headers['idempotent-replayed'], undefined)

  const repeat = await call({ path: '/v4/p1/a1/work' })
  answerQueued(repeat.res, repeat.route, 'run-1', true)
  t.equal((await repeat.got)?.headers['idempotent-replayed'], 'true')
})

t.test('answerWaitRanOut: 202 with the status and Preference-Applied', async t => {
  const c = await call({ path: '/v4/p1/a1/work' })
  answerWaitRanOut(c.res, c.route, 'run-2', 'running', 7)
  const got = await c.got
  t.equal(got?.status, 202)
  t.equal(got?.body, '{"run_id":"run-2","status":"running"}')
  t.equal(got?.headers['preference-applied'], 'wait=7')
  t.equal(got?.headers.location, '/v4/p1/a1/_runs/run-2')
})
