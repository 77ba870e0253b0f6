import { MalformedRequestError, RouteNotFoundError, RunNotFoundError } from '../../errors.ts'
import type { CallRoute } from '../../call/match-route.ts'
import { isRunId } from '../../shared/run-id-rule.ts'
import type { RunScope, RunView } from '../run-data.ts'
import type { RunAccess } from '../../config/sidecar-config.ts'
import type { StageCall } from '../../call/stage-call.ts'

/** A request for one of the sidecar's own `_runs` routes. */
export interface RunRoute {
  readonly scope: RunScope
  /** '' for `list` (the app's runs). */
  readonly runId: string
  readonly action: 'record' | 'events' | 'cancel' | 'list'
  /** The query, for `?after=` and the list's `?status=&limit=&cursor=`. */
  readonly query: string
}

const RUNS_PREFIX = '/_runs'
const UNDERSCORE = 0x5f
const SLASH = 0x2f
const PERCENT = 0x25

/**
 * The runs stage: undefined when the app path does not start with `_` (the call goes to the app,
 * its path as sent); else the `_runs` route it names. The path is read as it decodes and
 * normalises to (`%5F`, `%5f` and empty segments; no other escape). 400 for a malformed run id,
 * 404 for any other shape and any other `_` path (reserved, never forwarded).
 */
export function matchRunRoute (route: CallRoute): RunRoute | undefined {
  const raw = route.appPath
  const second = raw.charCodeAt(1)
  // the common path: its first segment starts with neither `_`, an escape, nor another `/`
  if (second !== UNDERSCORE && second !== SLASH && second !== PERCENT) return undefined
  const path = raw.includes('%5') || raw.includes('//') ? raw.replace(ESCAPED_UNDERSCORE, '_').replace(EMPTY_SEGMENTS, '/') : raw
  if (path.charCodeAt(1) !== UNDERSCORE) return undefined
  // app paths starting with `_` are reserved for the sidecar: only `_runs` is one of its routes yet
  if (!path.startsWith(RUNS_PREFIX) || (path.length > RUNS_PREFIX.length && path[RUNS_PREFIX.length] !== '/')) throw new RouteNotFoundError()
  // `/_runs` and `/_runs/`: the app's runs
  if (path.length <= RUNS_PREFIX.length + 1) return { scope: { projectId: route.projectId, appName: route.appName }, runId: '', action: 'list', query: route.forwardedQuery }
  const parts = path.slice(RUNS_PREFIX.length + 1).split('/')
  const runId = parts[0] as string
  if (runId === '' || parts.length > 2) throw new RouteNotFoundError()
  if (!isRunId(runId)) throw new MalformedRequestError('malformed run id: run ids match [A-Za-z0-9_-]{1,128}')
  const action = parts.length === 1 ? 'record' : parts[1] === 'events' ? 'events' : parts[1] === 'cancel' ? 'cancel' : undefined
  if (action === undefined) throw new RouteNotFoundError()
  return { scope: { projectId: route.projectId, appName: route.appName }, runId, action, query: route.forwardedQuery }
}

const ESCAPED_UNDERSCORE = /%5f/gi
const EMPTY_SEGMENTS = /\/{2,}/g

/** RUN_ACCESS, as the `_runs` routes apply it (`caller`: each caller's runs are its own); unset for the operator's console, which sees every run. */
export interface RunAccessRule {
  readonly access?: RunAccess | undefined
}

/** The `sub` whose runs alone the call may read, list and cancel (RUN_ACCESS=caller: the token's); undefined: every run of the app. */
export const subOf = (rule: RunAccessRule, call: StageCall): string | undefined => rule.access === 'caller' ? call.caller : undefined

/**
 * The view, when the caller may see it (`sub`: the one submitter whose runs it sees; undefined: it
 * sees every run of the app), else RunNotFoundError, the answer a run never recorded gets. A run
 * whose submitter is not known (recorded by an older version) is nobody's (docs/runs.md, "Who may
 * see a run: `RUN_ACCESS`").
 */
export function readable (view: RunView, sub: string | undefined): RunView {
  if (sub !== undefined && view.sub !== sub) throw new RunNotFoundError()
  return view
}
