import t from 'tap'
import { CANCEL_QUEUED, LIST_RUNS } from '../../../../src/runs/store/redis/redis-list-scripts.ts'
import { GROUP } from '../../../../src/runs/store/redis/redis-queue-scripts.ts'
import { pendingOf, scriptRedis, streamOf, zsetOf } from '../../../helpers/redis-state.ts'

// An app's runs as a whole on hand-made key states: a page read from the indexes by status
// (newest first, from a place, dead members swept), and the queued runs canceled a batch a step.

const P = 'as:{p/a}'
const INDEX = `${P}:runs`
const run = (id: string): string => `${P}:run:${id}`
const record = (id: string, status: string): string => `{"run_id":"${id}","status":"${status}"}`

t.test('the listing scripts', async t => {
  const redis = await scriptRedis(t)

  const list = (fields: Partial<Parameters<typeof LIST_RUNS.call>[1]> = {}): ReturnType<typeof LIST_RUNS.call> => LIST_RUNS.call(redis, {
    index: INDEX, runKeyPrefix: `${P}:run:`, maxScore: '+inf', after: '', statuses: 'running,succeeded', wanted: 10, ...fields
  })
  const indexed = async (id: string, status: string, at: number, webhookState?: string): Promise<void> => {
    await redis.hset(run(id), { record: record(id, status), ...webhookState === undefined ? {} : { webhook_state: webhookState } })
    await redis.zadd(`${INDEX}:${status}`, at, id)
  }

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

  const cancel = (from: string, count = 500): ReturnType<typeof CANCEL_QUEUED.call> => CANCEL_QUEUED.call(redis, {
    queue: `${P}:queue`, queuedBytes: `${P}:queued-bytes`, oldRunningSet: `${P}:running`, expiry: `${P}:expiry`, turns: `${P}:turns`, index: INDEX,
    runKeyPrefix: `${P}:run:`, eventsKeyPrefix: `${P}:events:`, liveChannelPrefix: `${P}:live:`, from, count,
    canceledFields: ',"error":"canceled"', ttlSeconds: 600, indexCutoffMs: ''
  })
  /** A run queued as SUBMIT leaves it: its entry (read by no one yet, or taken), record, bytes, time limit and turn. */
  const queued = async (id: string, status = 'queued'): Promise<string> => {
    const entry = await redis.xadd(`${P}:queue`, '*', 'run', id, 'turn', '1') as string
    await redis.hset(run(id), { record: record(id, status), request: '{}', body: 'xxxxxxxxxx', async: '1', entry, queued_bytes: '10', turn: `t-${id}`, turn_at: '5' })
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
})
