import t from 'tap'
import { MalformedRequestError } from '../../../src/errors.ts'
import { checkPurgeQuery, cursorOf, parseListQuery } from '../../../src/runs/routes/run-list-query.ts'

// The list's query (`GET …/_runs?status=&limit=&cursor=`), its cursor, and the purge's query
// (`DELETE …/_runs?status=queued`): docs/runs.md.

const BAD_STATUS = 'status must be one or more of queued, running, succeeded, failed, canceled, separated by commas'
const BAD_LIMIT = 'limit must be a whole number from 1 to 1000'
const BAD_CURSOR = 'malformed cursor'
const OTHER_FILTER = 'cursor was made for another status filter'
const BAD_PURGE = 'DELETE …/_runs needs status=queued: only queued runs are purged'

/** A cursor as it is written: base64url of its JSON. */
const cursorText = (json: unknown): string => Buffer.from(JSON.stringify(json)).toString('base64url')
const rawCursor = (text: string): string => Buffer.from(text).toString('base64url')

/** What `fn` throws (undefined: nothing). */
function refusalOf (fn: () => unknown): unknown {
  try {
    fn()
  } catch (error) {
    return error
  }
  return undefined
}

t.test('no query: every status, from the newest, 100 at most', async t => {
  t.same(parseListQuery(''), { statuses: undefined, after: undefined, limit: 100 })
  t.same(parseListQuery('other=1&after=2'), { statuses: undefined, after: undefined, limit: 100 }, 'other parameters are ignored')
})

t.test('status: one or more, in any order, once or repeated; read in the statuses\' order, each once', async t => {
  t.same(parseListQuery('status=queued').statuses, ['queued'])
  t.same(parseListQuery('status=canceled,queued,failed').statuses, ['queued', 'failed', 'canceled'])
  t.same(parseListQuery('status=succeeded&status=running').statuses, ['running', 'succeeded'])
  t.same(parseListQuery('status=failed,failed&status=failed').statuses, ['failed'])
  t.same(parseListQuery('status=queued%2Crunning').statuses, ['queued', 'running'], 'an escaped comma is a comma')
  t.same(parseListQuery('status=queued,running,succeeded,failed,canceled').statuses, ['queued', 'running', 'succeeded', 'failed', 'canceled'])
})

t.test('a bad status: 400', async t => {
  for (const query of ['status=', 'status=done', 'status=Queued', 'status=queued,', 'status=,queued', 'status=queued&status=', 'status=queued%20', 'status=queued+running']) {
    const error = refusalOf(() => parseListQuery(query))
    t.type(error, MalformedRequestError, query)
    t.match(error, { status: 400, message: BAD_STATUS }, query)
  }
})

t.test('limit: a whole number from 1 to 1000', async t => {
  t.equal(parseListQuery('limit=1').limit, 1)
  t.equal(parseListQuery('limit=1000').limit, 1000)
  t.equal(parseListQuery('limit=0042').limit, 42, 'leading zeros are a number')
  for (const query of ['limit=0', 'limit=1001', 'limit=9999', 'limit=10000', 'limit=-1', 'limit=1.5', 'limit=1e2', 'limit=', 'limit=ten', 'limit=+5', 'limit=%205', 'limit=0x10']) {
    const error = refusalOf(() => parseListQuery(query))
    t.type(error, MalformedRequestError, query)
    t.match(error, { status: 400, message: BAD_LIMIT }, query)
  }
})

t.test('limit or cursor given twice: 400 naming it', async t => {
  t.match(refusalOf(() => parseListQuery('limit=1&limit=1')), { status: 400, message: 'limit given more than once' })
  const cursor = cursorOf(undefined, { createdAt: 1, runId: 'r1' })
  t.match(refusalOf(() => parseListQuery(`cursor=${cursor}&cursor=${cursor}`)), { status: 400, message: 'cursor given more than once' })
})

t.test('cursorOf writes the filter and the last run as base64url JSON', async t => {
  const at = { createdAt: 1_700_000_000_123, runId: 'run_9-x' }
  t.equal(cursorOf(undefined, at), cursorText({ s: '', t: 1_700_000_000_123, id: 'run_9-x' }))
  t.equal(cursorOf(['queued', 'failed'], at), cursorText({ s: 'queued,failed', t: 1_700_000_000_123, id: 'run_9-x' }))
  t.match(cursorOf(['queued'], at), /^[A-Za-z0-9_-]+$/, 'safe in a query as it is')
})

t.test('a cursor: the page after its run, with its filter', async t => {
  const at = { createdAt: 1_700_000_000_123, runId: 'r1' }
  t.same(parseListQuery(`cursor=${cursorOf(undefined, at)}`), { statuses: undefined, after: at, limit: 100 })
  t.same(parseListQuery(`cursor=${cursorOf(['queued', 'canceled'], at)}&limit=5`), { statuses: ['queued', 'canceled'], after: at, limit: 5 },
    'the cursor carries the filter: no status needed with it')
  t.same(parseListQuery(`status=canceled,queued&cursor=${cursorOf(['queued', 'canceled'], at)}`).statuses, ['queued', 'canceled'],
    'the same filter written in another order is the same filter')
  t.same(parseListQuery(`status=queued&status=queued&cursor=${cursorOf(['queued'], at)}`).statuses, ['queued'])
  t.same(parseListQuery(`cursor=${cursorText({ s: '', t: 0, id: 'r' })}`).after, { createdAt: 0, runId: 'r' }, 'time 0 is a time')
})

t.test('a status other than the cursor\'s filter: 400', async t => {
  const at = { createdAt: 5, runId: 'r1' }
  for (const [query, cursor] of [
    ['status=queued', cursorOf(undefined, at)],
    ['status=queued', cursorOf(['queued', 'running'], at)],
    ['status=running', cursorOf(['queued'], at)],
    ['status=queued,running,succeeded,failed,canceled', cursorOf(undefined, at)]
  ] as const) {
    const error = refusalOf(() => parseListQuery(`${query}&cursor=${cursor}`))
    t.type(error, MalformedRequestError, query)
    t.match(error, { status: 400, message: OTHER_FILTER }, query)
  }
  t.match(refusalOf(() => parseListQuery(`status=bogus&cursor=${cursorOf(undefined, at)}`)), { message: BAD_STATUS }, 'a bad status is named as such')
})

t.test('a malformed cursor: 400', async t => {
  const cursors = {
    empty: '',
    'not base64url': 'abc+def/',
    padded: cursorText({ s: '', t: 1, id: 'r1' }) + '=',
    'not JSON': rawCursor('{s:'),
    null: rawCursor('null'),
    'a number': rawCursor('42'),
    'a string': rawCursor('"x"'),
    'an array': rawCursor('[]'),
    'no filter': cursorText({ t: 1, id: 'r1' }),
    'a filter not a string': cursorText({ s: ['queued'], t: 1, id: 'r1' }),
    'an unknown status': cursorText({ s: 'queued,done', t: 1, id: 'r1' }),
    'no time': cursorText({ s: '', id: 'r1' }),
    'a negative time': cursorText({ s: '', t: -1, id: 'r1' }),
    'a fractional time': cursorText({ s: '', t: 1.5, id: 'r1' }),
    'a time as text': cursorText({ s: '', t: '1', id: 'r1' }),
    'an unsafe time': cursorText({ s: '', t: 2 ** 53, id: 'r1' }),
    'no run id': cursorText({ s: '', t: 1 }),
    'a malformed run id': cursorText({ s: '', t: 1, id: 'r.1' }),
    'an empty run id': cursorText({ s: '', t: 1, id: '' }),
    'a run id not a string': cursorText({ s: '', t: 1, id: 7 })
  }
  for (const [name, cursor] of Object.entries(cursors)) {
    const error = refusalOf(() => parseListQuery(`cursor=${cursor}`))
    t.type(error, MalformedRequestError, name)
    t.match(error, { status: 400, message: BAD_CURSOR }, name)
  }
})

t.test('the purge needs status=queued, and no other status', async t => {
  for (const query of ['status=queued', 'status=queued,queued', 'status=queued&status=queued', 'status=queued&limit=5']) {
    t.doesNotThrow(() => { checkPurgeQuery(query) }, query)
  }
  for (const query of ['', 'status=', 'status=running', 'status=queued,running', 'status=queued&status=failed', 'status=Queued', 'status=queued,', 'limit=1', 'status=bogus']) {
    const error = refusalOf(() => { checkPurgeQuery(query) })
    t.type(error, MalformedRequestError, query)
    t.match(error, { status: 400, message: BAD_PURGE }, query)
  }
})
