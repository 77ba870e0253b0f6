import t from 'tap'
import { MalformedRequestError, RouteNotFoundError } from '../../../src/errors.ts'
import type { CallRoute } from '../../../src/call/match-route.ts'
import { matchRunRoute } from '../../../src/runs/routes/run-route.ts'

// matchRunRoute: which app paths are the sidecar's own `_runs` routes (docs/runs.md), which go
// to the app, and which are refused.

const SCOPE = { projectId: 'p1', appName: 'a1' }

/** The route the route stage found for app path `appPath` (and query). */
function routeFor (appPath: string, forwardedQuery = ''): CallRoute {
  return { ...SCOPE, appPath, forwardedQuery, webhookEndpoint: undefined, accessToken: undefined, async: false }
}

const match = (appPath: string, query = ''): ReturnType<typeof matchRunRoute> => matchRunRoute(routeFor(appPath, query))

/** What matching `appPath` throws (undefined: nothing). */
function refusalOf (appPath: string): unknown {
  try {
    match(appPath)
  } catch (error) {
    return error
  }
  return undefined
}

t.test('paths that do not start with `_` go to the app as sent', async t => {
  for (const path of ['/', '/work', '/run/_runs', '/a_b', '/runs', '/%41_runs', '/%2F_runs', '/%5Ework', '//work', '///work/x', '/%5', '/-_runs']) {
    t.equal(match(path), undefined, path)
  }
})

t.test('`/_runs` and `/_runs/` are the app\'s runs: list, with the query and the scope', async t => {
  t.same(match('/_runs', 'status=queued&limit=2'), { scope: SCOPE, runId: '', action: 'list', query: 'status=queued&limit=2' })
  t.same(match('/_runs/'), { scope: SCOPE, runId: '', action: 'list', query: '' })
})

t.test('a run\'s record, events and cancel', async t => {
  t.same(match('/_runs/run-1'), { scope: SCOPE, runId: 'run-1', action: 'record', query: '' })
  t.same(match('/_runs/run-1/events', 'after=3'), { scope: SCOPE, runId: 'run-1', action: 'events', query: 'after=3' })
  t.same(match('/_runs/Run_9-x/cancel'), { scope: SCOPE, runId: 'Run_9-x', action: 'cancel', query: '' })
  const other = matchRunRoute({ ...routeFor('/_runs/r'), projectId: 'p2', appName: 'a2' })
  t.same(other?.scope, { projectId: 'p2', appName: 'a2' }, 'the scope is the route\'s project and app')
})

t.test('`%5F` and `%5f` read as `_`, empty segments as one `/`', async t => {
  t.same(match('/%5Fruns'), { scope: SCOPE, runId: '', action: 'list', query: '' })
  t.same(match('/%5fruns/r1'), { scope: SCOPE, runId: 'r1', action: 'record', query: '' })
  t.same(match('//_runs'), { scope: SCOPE, runId: '', action: 'list', query: '' })
  t.same(match('//_runs//r1///events'), { scope: SCOPE, runId: 'r1', action: 'events', query: '' })
  t.same(match('/_runs//r1//cancel'), { scope: SCOPE, runId: 'r1', action: 'cancel', query: '' })
  t.same(match('/_runs/a%5Fb%5fc'), { scope: SCOPE, runId: 'a_b_c', action: 'record', query: '' })
})

t.test('any other `_` path is reserved: 404, never forwarded', async t => {
  const paths = ['/_', '/_/', '/_run', '/_runsx', '/_runs-1', '/_Runs', '/_RUNS/r1', '/_other/r1', '/__runs', '/%5F', '/%5f%5fruns', '//_x', '/_runs%2Fr1',
    '/%5F%72uns'] // no other escape is decoded: `%72` is not `r`
  for (const path of paths) {
    const error = refusalOf(path)
    t.type(error, RouteNotFoundError, path)
    t.match(error, { status: 404, message: 'no such route' }, path)
  }
})

t.test('any other shape under `_runs`: 404', async t => {
  for (const path of ['/_runs/r1/', '/_runs/r1/other', '/_runs/r1/events/', '/_runs/r1/events/more', '/_runs/r1/cancel/x', '/_runs/r1/Events', '/_runs/r1/%65vents']) {
    t.type(refusalOf(path), RouteNotFoundError, path)
  }
})

t.test('a malformed run id: 400, before the action is looked at', async t => {
  const message = 'malformed run id: run ids match [A-Za-z0-9_-]{1,128}'
  for (const path of ['/_runs/r.1', '/_runs/r1.done/events', '/_runs/r%201', '/_runs/r%2D1', '/_runs/ü', '/_runs/' + 'x'.repeat(129), '/_runs/r:1/other']) {
    const error = refusalOf(path)
    t.type(error, MalformedRequestError, path)
    t.match(error, { status: 400, code: 'SIDECAR_MALFORMED_REQUEST', message }, path)
  }
  t.equal(match('/_runs/' + 'x'.repeat(128))?.runId, 'x'.repeat(128), '128 characters is a run id')
})
