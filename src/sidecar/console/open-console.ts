import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { InvalidTokenError, MalformedRequestError, MethodNotAllowedError, MissingTokenError, OriginNotAllowedError, RouteNotFoundError } from '../../errors.ts'
import type { CallsByRunId } from '../../call/calls-by-run-id.ts'
import { createRunRoutes } from '../../runs/routes/run-routes.ts'
import type { RunRoute } from '../../runs/routes/run-route.ts'
import type { RunStore } from '../../runs/store/run-store.ts'
import { sendJson } from '../../shared/http-answers.ts'
import { isRunId } from '../../shared/run-id-rule.ts'
import { DONE_ID_SUFFIX } from '../../stream/sse-frame.ts'
import type { AdminRoutes } from '../admin-server.ts'
import { ConsoleAccess, CONSOLE_PATH, isSameOrigin } from './console-access.ts'
import { CONSOLE_HEADERS, loadConsoleAssets, sendAsset } from './console-assets.ts'
import { ConsoleCall } from './console-call.ts'
import { ConsoleHistory } from './console-history.ts'
import { type OverviewDeps, readOverview } from './console-overview.ts'
import { serveConsoleRuns } from './console-runs.ts'

export interface ConsoleDeps extends OverviewDeps {
  /** CONSOLE_TOKEN. */
  readonly token: string
  readonly store: RunStore
  /** This replica's calls in flight by run id (a cancel finds a recorded sync call here). */
  readonly calls: CallsByRunId
  /** SSE_HEARTBEAT_SECONDS in ms, RUN_MAX_READERS: as for the public events route. */
  readonly heartbeatMs: number
  readonly maxReaders: number
  readonly logger: Logger
}

/** The operator console on the admin port: its routes, and its 15-minute history sampler. */
export interface OperatorConsole {
  readonly routes: AdminRoutes
  /** Stops the sampler. */
  close: () => void
}

/** Largest login body: a form or JSON with the token. */
const LOGIN_MAX_BYTES = 4096
const GET = ['GET', 'HEAD']

/**
 * The console (docs/console.md): the page and its files, the login, and the data routes under
 * /console/api (cookie or bearer, else 401; a POST also from the console's own origin, else 403).
 * Its runs routes are the `_runs` routes' own code, for the app PROJECT_ID and APP_NAME name; its
 * list adds each run's caller and urgency (console-runs.ts).
 */
export function openConsole (deps: ConsoleDeps): OperatorConsole {
  const access = new ConsoleAccess(deps.token)
  const assets = loadConsoleAssets()
  const history = new ConsoleHistory(deps.metrics.registry)
  history.start()
  const { metrics, store, scope } = deps
  const serveRunRoute = createRunRoutes({
    store, maxReaders: deps.maxReaders, heartbeatMs: deps.heartbeatMs, metrics, runsTotal: metrics.runsTotal, calls: deps.calls, cancels: metrics.cancels
  })

  async function login (req: IncomingMessage, res: ServerResponse): Promise<void> {
    const token = tokenOf(await readSmallBody(req))
    if (token === undefined) throw new MissingTokenError()
    if (!access.isToken(token)) throw new InvalidTokenError('not the console token')
    res.writeHead(204, { 'set-cookie': access.loginCookie() }).end()
  }

  /** A data route, the caller let in: the tiles, the charts, the app's runs and one run's record, events and cancel, the purge. */
  async function data (call: ConsoleCall, path: string, query: string): Promise<void> {
    const method = call.req.method as string
    const json = (body: unknown): void => { sendJson(call.out, 200, JSON.stringify(body)) }
    if (path === '/overview' || path === '/history') {
      if (!GET.includes(method)) throw new MethodNotAllowedError('GET, HEAD')
      return json(path === '/overview' ? await readOverview(deps) : history.columns())
    }
    if (path === '/purge') {
      if (method !== 'POST') throw new MethodNotAllowedError('POST')
      const canceled = await store.listing.cancelQueued(scope)
      // counted as the cancel of each would count it (none had started), as DELETE …/_runs does
      if (canceled > 0) metrics.runsTotal.labels('canceled').inc(canceled)
      return json({ canceled })
    }
    if (path === '/runs') return await serveConsoleRuns(call, store, scope, query)
    const [, runs, runId, action, ...rest] = path.split('/')
    if (runs !== 'runs' || runId === undefined || rest.length > 0) throw new RouteNotFoundError()
    if (!isRunId(runId)) throw new MalformedRequestError('malformed run id: run ids match [A-Za-z0-9_-]{1,128}')
    const route: RunRoute = { scope, runId, action: action === undefined ? 'record' : action === 'events' ? 'events' : action === 'cancel' ? 'cancel' : 'list', query }
    if (route.action === 'list') throw new RouteNotFoundError()
    // an EventSource reconnecting after the `done` event: the stream has ended, it stops
    const lastEventId = call.req.headers['last-event-id']
    if (route.action === 'events' && typeof lastEventId === 'string' && lastEventId.endsWith(DONE_ID_SUFFIX)) {
      call.out.writeHead(204, {}).end()
      return
    }
    await serveRunRoute(call, route)
  }

  async function serve (req: IncomingMessage, res: ServerResponse, path: string, query: string): Promise<void> {
    const asset = assets.get(path)
    if (asset !== undefined) {
      if (!GET.includes(req.method as string)) throw new MethodNotAllowedError('GET, HEAD')
      return sendAsset(res, asset, req.method === 'HEAD')
    }
    const post = req.method === 'POST'
    if (path === '/login' || path === '/logout') {
      if (!post) throw new MethodNotAllowedError('POST')
      if (!isSameOrigin(req)) throw new OriginNotAllowedError()
      if (path === '/login') return await login(req, res)
      res.writeHead(204, { 'set-cookie': ConsoleAccess.logoutCookie() }).end()
      return
    }
    if (!path.startsWith('/api/')) throw new RouteNotFoundError()
    if (!access.allows(req)) throw req.headers.authorization === undefined && req.headers.cookie === undefined ? new MissingTokenError() : new InvalidTokenError('not the console token')
    if (post && !isSameOrigin(req)) throw new OriginNotAllowedError()
    // no action reads a body: the socket is freed of it
    if (post) req.resume()
    const call = new ConsoleCall(req, res, scope, deps.logger)
    await data(call, path.slice('/api'.length), query).catch(error => { call.answer(error) })
  }

  return {
    routes (req, res) {
      const url = req.url ?? '/'
      const at = url.indexOf('?')
      const path = at === -1 ? url : url.slice(0, at)
      if (path !== CONSOLE_PATH && !path.startsWith(`${CONSOLE_PATH}/`)) return false
      for (const [name, value] of Object.entries(CONSOLE_HEADERS)) res.setHeader(name, value)
      serve(req, res, path.slice(CONSOLE_PATH.length), at === -1 ? '' : url.slice(at + 1)).catch(error => {
        new ConsoleCall(req, res, scope, deps.logger).answer(error)
      })
      return true
    },
    close () { history.stop() }
  }
}

/** The token of a login: a JSON `{"token": …}` or a form's `token=…`. */
function tokenOf (body: string): string | undefined {
  if (body.startsWith('{')) {
    try {
      const token: unknown = (JSON.parse(body) as { token?: unknown }).token
      return typeof token === 'string' ? token : undefined
    } catch {
      return undefined
    }
  }
  return new URLSearchParams(body).get('token') ?? undefined
}

/** A request body of at most LOGIN_MAX_BYTES, as text; a longer one is refused. */
async function readSmallBody (req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = []
  let bytes = 0
  for await (const chunk of req as AsyncIterable<Buffer>) {
    bytes += chunk.length
    if (bytes > LOGIN_MAX_BYTES) throw new MalformedRequestError(`a login body is at most ${LOGIN_MAX_BYTES} bytes`)
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString('utf8')
}
