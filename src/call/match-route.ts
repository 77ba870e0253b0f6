import type { IncomingMessage } from 'node:http'
import { RouteNotFoundError } from '../errors.ts'
import { parseInvokeRoute, splitQuery } from './invoke-route.ts'

/** What the route stage found in a `/v4/{project}/{app}/{path…}` target. */
export interface CallRoute {
  readonly projectId: string
  readonly appName: string
  /** The app path, always starting with `/`. */
  readonly appPath: string
  /** The query forwarded to the app (without the parameters the sidecar consumes). */
  readonly forwardedQuery: string
  readonly webhookEndpoint: string | undefined
  readonly accessToken: string | undefined
  /** `?async=true`: run later, answer 202 now (the `Prefer: respond-async` header is checked with the headers). */
  readonly async: boolean
}

export interface RouteRules {
  /** When set, calls for any other project or app are 404. */
  readonly projectId: string | undefined
  readonly appName: string | undefined
  /** ALLOW_QUERY_TOKEN: take `access_token` out of the query. */
  readonly allowQueryToken: boolean
}

/** The route stage (404): the call's project, app, path and query, or RouteNotFoundError. */
export function matchRoute (call: { readonly req: IncomingMessage }, rules: RouteRules): CallRoute {
  const route = parseInvokeRoute(call.req.url as string)
  if (route === undefined ||
      (rules.projectId !== undefined && route.projectId !== rules.projectId) ||
      (rules.appName !== undefined && route.appName !== rules.appName)) {
    throw new RouteNotFoundError('no such app')
  }
  const query = splitQuery(route.query, rules.allowQueryToken)
  return {
    projectId: route.projectId,
    appName: route.appName,
    appPath: route.appPath,
    forwardedQuery: query.forwarded,
    webhookEndpoint: query.webhookEndpoint,
    accessToken: query.accessToken,
    async: query.async
  }
}

/** The path and query the app gets: APP_URL's path (`basePath`, no trailing slash), the app path, the forwarded query. */
export function appRequestPath (route: CallRoute, basePath: string): string {
  return basePath + route.appPath + (route.forwardedQuery === '' ? '' : '?' + route.forwardedQuery)
}
