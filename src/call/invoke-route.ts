/** A `/v4/{project_id}/{app_name}/{path…}` call, split into its parts (raw, not normalised). */
export interface InvokeRoute {
  readonly projectId: string
  readonly appName: string
  /** The app path, always starting with `/` (empty path: `/`). */
  readonly appPath: string
  /** The raw query string without `?`, or '' when there is none. */
  readonly query: string
}

const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/** Splits a request target of the form `/v4/{project}/{app}/{path…}`; undefined when it is not one. */
export function parseInvokeRoute (url: string): InvokeRoute | undefined {
  if (!url.startsWith('/v4/')) return undefined
  const queryAt = url.indexOf('?')
  const path = queryAt === -1 ? url : url.slice(0, queryAt)
  const query = queryAt === -1 ? '' : url.slice(queryAt + 1)
  const projectEnd = path.indexOf('/', 4)
  if (projectEnd === -1) return undefined
  const projectId = path.slice(4, projectEnd)
  const appEnd = path.indexOf('/', projectEnd + 1)
  const appName = appEnd === -1 ? path.slice(projectEnd + 1) : path.slice(projectEnd + 1, appEnd)
  if (!ID.test(projectId) || !ID.test(appName)) return undefined
  const appPath = appEnd === -1 ? '/' : path.slice(appEnd)
  return { projectId, appName, appPath, query }
}

/** The query parameters the sidecar itself consumes, and the query forwarded without them. */
export interface SplitQuery {
  readonly forwarded: string
  readonly webhookEndpoint: string | undefined
  readonly accessToken: string | undefined
  /** `async=true` was in the query (it is not forwarded). */
  readonly async: boolean
}

const NOTHING_TAKEN: Omit<SplitQuery, 'forwarded'> = { webhookEndpoint: undefined, accessToken: undefined, async: false }

/**
 * Removes `webhookEndpoint` and `async=true` (always) and `access_token` (when `takeAccessToken`) from a raw query,
 * keeping every other parameter byte for byte and in order.
 */
export function splitQuery (query: string, takeAccessToken: boolean): SplitQuery {
  if (query === '' || (!query.includes('webhookEndpoint') && !query.includes('access_token') && !query.includes('async') && !query.includes('%'))) {
    return { forwarded: query, ...NOTHING_TAKEN }
  }
  let webhookEndpoint: string | undefined
  let accessToken: string | undefined
  let async = false
  const kept: string[] = []
  for (const pair of query.split('&')) {
    const eq = pair.indexOf('=')
    const name = decodeComponent(eq === -1 ? pair : pair.slice(0, eq))
    const value = eq === -1 ? '' : pair.slice(eq + 1)
    if (name === 'webhookEndpoint') {
      webhookEndpoint ??= decodeComponent(value)
    } else if (takeAccessToken && name === 'access_token') {
      accessToken ??= decodeComponent(value)
    } else if (name === 'async' && decodeComponent(value) === 'true') {
      async = true
    } else {
      kept.push(pair)
    }
  }
  return { forwarded: kept.join('&'), webhookEndpoint, accessToken, async }
}

function decodeComponent (text: string): string {
  const spaced = text.includes('+') ? text.replaceAll('+', ' ') : text
  try {
    return decodeURIComponent(spaced)
  } catch {
    return spaced
  }
}
