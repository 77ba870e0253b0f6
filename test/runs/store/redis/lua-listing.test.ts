import t from 'tap'
import { CANCEL_QUEUED, LIST_OWN_RUNS, LIST_RUNS } from '../../../../src/runs/store/redis/redis-list-scripts.ts'
import { GROUP } from '../../../../src/runs/store/redis/redis-queue-scripts.ts'
import { pendingOf, scriptRedis, streamOf, zsetOf } from '../../../helpers/redis-state.ts'

// An app's runs as a whole on hand-made key states: a page read from the indexes by status
// (newest first, from a place, dead members swept), one caller's page read in bounded steps, and
// the queued runs canceled a batch a step (all of them, or one caller's).

const P = 'as:{p/a}'
const INDEX = `${P}:runs`
const run = (id: string): string => `${P}:run:${id}`
const record = (id: string, status: string): string => `{"run_id":"${id}","status":"${status}"}`

t.test('the listing scripts', async t => {
  const redis = await scriptRedis(t)

  const list = (fields: Partial<Parameters<typeof LIST_RUNS.call>[1]> = {}): ReturnType<typeof LIST_RUNS.call> => LIST_RUNS.call(redis, {
    index: INDEX, runKeyPrefix: `${P}:run:`, maxScore: '+inf', after: '', statuses: 'running,succeeded', wanted: 10, ...fields
  })
  const indexed = async (id: string, status: string, at: number, webhookState?: string, sub?: string): Promise<void> => {
    await redis.hset(run(id), { record: record(id, status), ...webhookState === undefined ? {} : { webhook_state: webhookState }, ...sub === undefined ? {} : { sub } })
    await redis.zadd(`${INDEX}:${status}`, at, id)
  }
  const listOwn = (fields: Partial<Parameters<typeof LIST_OWN_RUNS.call>[1]> = {}): ReturnType<typeof LIST_OWN_RUNS.call> => LIST_OWN_RUNS.call(redis, {
    index: INDEX, runKeyPrefix: `${P}:run:`, maxScore: '+inf', after: '', statuses: 'running,succeeded', wanted: 10, sub: 'alice', budget: 100, ...fields
  })
  const ids = (step: Awaited<ReturnType<typeof LIST_OWN_RUNS.call>>): string[] => step.runs.map(listed => listed.runId)

  t.test('LIST_RUNS: the statuses asked for, newest first (then run id, descending), with their webhook state', async t => {
    await indexed('a', 'running', 100)
    await indexed('b', 'succeeded', 300, 'delivered 1')
    await indexed('c', 'succeeded', 200)
    await indexed('d', 'running', 200)
    await indexed('e', 'failed', 400)
    t.same(await list(), [
      { runId: 'b', score: 300, record: record('b', 'succeeded'), webhookState: 'delivered 1' },
      { runId: 'd', score: 200, record: record('d', 'running'), webhookState: '' },
      { runId: 'c', score: 200, record: record('c', 'succeeded'), webhookState: '' },
      { runId: 'a', score: 100, record: record('a', 'running'), webhookState: '' }
    ])
    t.same((await list({ wanted: 2 })).map(listed => listed.runId), ['b', 'd'], 'the newest `wanted`')
    t.same((await list({ statuses: 'failed' })).map(listed => listed.runId), ['e'])
  })

  t.test('LIST_RUNS: from just after a place: that score\'s ids from `after` up are skipped', async t => {
    for (const id of ['a', 'b', 'c']) await indexed(id, 'succeeded', 200)
    await indexed('z', 'succeeded', 300)
    await indexed('y', 'succeeded', 100)
    t.same((await list({ maxScore: 200, after: 'b' })).map(listed => listed.runId), ['a', 'y'])
    t.same((await list({ maxScore: 200, after: '' })).map(listed => listed.runId), ['c', 'b', 'a', 'y'], 'no `after`: the score itself included')
  })

  t.test('LIST_RUNS: a member whose run is gone leaves its index as it is met, and still fills the page', async t => {
    await indexed('a', 'succeeded', 100)
    await redis.zadd(`${INDEX}:succeeded`, 200, 'gone1', 300, 'gone2')
    t.same((await list({ wanted: 1 })).map(listed => listed.runId), ['a'])
    t.same(await zsetOf(redis, `${INDEX}:succeeded`), [['a', 100]])
  })

  t.test('LIST_OWN_RUNS: the sub\'s runs of the statuses asked for, merged newest first (then run id); a run without a sub is nobody\'s', async t => {
    await indexed('a', 'running', 100, undefined, 'alice')
    await indexed('b', 'succeeded', 300, 'delivered 1', 'alice')
    await indexed('c', 'succeeded', 200, undefined, 'alice')
    await indexed('d', 'running', 200, undefined, 'alice')
    await indexed('e', 'failed', 400, undefined, 'alice')
    await indexed('f', 'succeeded', 250, undefined, 'bob')
    await indexed('g', 'running', 260)
    await indexed('h', 'running', 270, undefined, '')
    t.same(await listOwn(), {
      runs: [
        { runId: 'b', score: 300, record: record('b', 'succeeded'), webhookState: 'delivered 1' },
        { runId: 'd', score: 200, record: record('d', 'running'), webhookState: '' },
        { runId: 'c', score: 200, record: record('c', 'succeeded'), webhookState: '' },
        { runId: 'a', score: 100, record: record('a', 'running'), webhookState: '' }
      ],
      stopped: undefined
    })
    t.same(ids(await listOwn({ wanted: 2 })), ['b', 'd'], 'the newest `wanted`')
    t.same(ids(await listOwn({ statuses: 'failed' })), ['e'])
    t.same(ids(await listOwn({ sub: 'bob' })), ['f'])
    t.same(ids(await listOwn({ sub: '' })), ['h'], 'the sub \'\' (auth off) is one caller; g has none and is nobody\'s')
    t.same(ids(await listOwn({ sub: 'carol' })), [])
  })

  t.test('LIST_OWN_RUNS: from just after a place; a step reads at most `budget` runs and says where it stopped', async t => {
    for (let i = 0; i < 10; i++) await indexed(`o${i}`, i % 2 === 0 ? 'running' : 'succeeded', 100 + i, undefined, 'bob')
    await indexed('a1', 'succeeded', 50, undefined, 'alice')
    await indexed('a2', 'running', 200, undefined, 'alice')
    await indexed('a3', 'running', 200, undefined, 'alice')
    t.same(ids(await listOwn({ maxScore: 200, after: 'a3' })), ['a2', 'a1'], 'that score\'s ids from `after` up are skipped')
    const first = await listOwn({ maxScore: 200, after: 'a2', budget: 4 })
    t.same(ids(first), [], 'four of bob\'s runs read, none alice\'s')
    t.same(first.stopped, { score: '106', runId: 'o6' }, 'the last run read')
    const second = await listOwn({ maxScore: first.stopped?.score, after: first.stopped?.runId, budget: 4 })
    t.same(ids(second), [])
    t.same(second.stopped, { score: '102', runId: 'o2' })
    const third = await listOwn({ maxScore: second.stopped?.score, after: second.stopped?.runId, budget: 4 })
    t.same(third, { runs: [{ runId: 'a1', score: 50, record: record('a1', 'succeeded'), webhookState: '' }], stopped: undefined }, 'the indexes\' end')
    const found = await listOwn({ wanted: 1, budget: 1 })
    t.same([ids(found), found.stopped], [['a3'], undefined], 'the page found: nothing more to read, though the budget is spent')
  })

  t.test('LIST_OWN_RUNS: a member whose run is gone leaves its index as it is met, and counts in the budget', async t => {
    await indexed('a', 'succeeded', 100, undefined, 'alice')
    await redis.zadd(`${INDEX}:succeeded`, 200, 'gone1', 300, 'gone2')
    const step = await listOwn({ budget: 2 })
    t.same([ids(step), step.stopped], [[], { score: '200', runId: 'gone1' }])
    t.same(await zsetOf(redis, `${INDEX}:succeeded`), [['a', 100]])
    t.same(ids(await listOwn({ maxScore: 200, after: 'gone1' })), ['a'])
  })

  const cancel = (from: string, count = 500, sub?: string): ReturnType<typeof CANCEL_QUEUED.call> => CANCEL_QUEUED.call(redis, {
    queue: `${P}:queue`, queuedBytes: `${P}:queued-bytes`, oldRunningSet: `${P}:running`, expiry: `${P}:expiry`, turns: `${P}:turns`, index: INDEX,
    runKeyPrefix: `${P}:run:`, eventsKeyPrefix: `${P}:events:`, liveChannelPrefix: `${P}:live:`, from, count,
    canceledFields: ',"error":"canceled"', ttlSeconds: 600, indexCutoffMs: '', bySub: sub === undefined ? '' : '1', sub: sub ?? ''
  })
  /** A run queued as SUBMIT leaves it: its entry (read by no one yet, or taken), record, bytes, time limit and turn. */
  const queued = async (id: string, status = 'queued', sub?: string): Promise<string> => {
    const entry = await redis.xadd(`${P}:queue`, '*', 'run', id, 'turn', '1') as string
    await redis.hset(run(id), { record: record(id, status), request: '{}', body: 'xxxxxxxxxx', async: '1', entry, queued_bytes: '10', turn: `t-${id}`, turn_at: '5', ...sub === undefined ? {} : { sub } })
    await redis.incrby(`${P}:queued-bytes`, 10)
    await redis.zadd(`${P}:expiry`, 9_999_999_999_999, id)
    await redis.zadd(`${P}:turns`, 5, `t-${id}`)
    await redis.zadd(`${INDEX}:${status}`, 1000, id)
    return entry
  }

  t.test('CANCEL_QUEUED cancels each queued run as a cancel does, and leaves a running one alone', async t => {
    await redis.xgroup('CREATE', `${P}:queue`, GROUP, '0', 'MKSTREAM')
    const first = await queued('q1')
    const taken = await queued('q2', 'running')
    await redis.call('XREADGROUP', 'GROUP', GROUP, 'sidecar-a', 'COUNT', 2, 'STREAMS', `${P}:queue`, '>')
    const last = await queued('q3')
    t.same(await cancel('-'), { canceled: 2, last })
    t.same(await redis.hgetall(run('q1')), {
      record: '{"run_id":"q1","status":"canceled","error":"canceled"}', async: '1', entry: first
    }, 'its record canceled, its request, body, bytes and turn gone')
    const ttl = await redis.ttl(run('q1'))
    t.ok(ttl > 590 && ttl <= 600)
    t.equal(await redis.hget(run('q2'), 'record'), record('q2', 'running'), 'a run started meanwhile stays running')
    t.same((await streamOf(redis, `${P}:queue`)).map(([id]) => id), [taken], 'the canceled runs\' entries deleted')
    t.same((await pendingOf(redis, `${P}:queue`, GROUP)).map(([id]) => id), [taken], 'and acknowledged')
    t.equal(await redis.get(`${P}:queued-bytes`), '10', 'their bytes given back')
    t.same((await zsetOf(redis, `${P}:expiry`)).map(([id]) => id), ['q2'])
    t.same((await zsetOf(redis, `${P}:turns`)).map(([id]) => id), ['t-q2'])
    t.same(await zsetOf(redis, `${INDEX}:queued`), [])
    t.same(await zsetOf(redis, `${INDEX}:canceled`), [['q1', 1000], ['q3', 1000]])
    t.same(await cancel(last), { canceled: 0, last: '' }, 'after the last entry: the queue\'s end')
  })

  t.test('CANCEL_QUEUED goes a batch of entries a step, from after the last one read', async t => {
    const entries = [await queued('q1'), await queued('q2'), await queued('q3')]
    t.same(await cancel('-', 2), { canceled: 2, last: entries[1] })
    t.equal(await redis.hget(run('q3'), 'record'), record('q3', 'queued'), 'not reached yet')
    t.same(await cancel(entries[1] as string, 2), { canceled: 1, last: entries[2] })
    t.equal(await redis.get(`${P}:queued-bytes`), '0')
  })

  t.test('CANCEL_QUEUED with a sub cancels that sub\'s queued runs alone; a run without one is nobody\'s', async t => {
    await queued('q1', 'queued', 'alice')
    await queued('q2', 'queued', 'bob')
    const third = await queued('q3')
    const last = await queued('q4', 'queued', 'alice')
    t.same(await cancel('-', 500, 'alice'), { canceled: 2, last })
    t.same(await zsetOf(redis, `${INDEX}:canceled`), [['q1', 1000], ['q4', 1000]])
    t.same(await zsetOf(redis, `${INDEX}:queued`), [['q2', 1000], ['q3', 1000]], 'bob\'s run and the one without a sub stay queued')
    t.equal(await redis.get(`${P}:queued-bytes`), '20')
    t.same(await cancel('-', 500, ''), { canceled: 0, last: third }, 'the sub \'\' is not "none"')
  })
})
