import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import {
  BuildNotFoundError, MalformedIdError, ServiceAccountNotFoundError, StoreMethodNotAllowedError,
  StoreRouteNotFoundError
} from '../errors.ts'
import { NewServiceAccountSchema } from './api-schemas.ts'
import type { BuildRepository } from './build-repository.ts'
import { type BuildKey, ID_PATTERN_SOURCE, parseBuildInput } from './build-schema.ts'
import { readJsonBody } from './request-json.ts'
import { compileBodyCheck } from './schema-check.ts'
import type { ServiceAccounts } from './service-accounts.ts'
import type { StoreAuth } from './store-auth.ts'
import { sendJson, sendStoreError } from './store-responses.ts'

export interface StoreRouteDeps {
  readonly auth: StoreAuth
  readonly builds: BuildRepository
  readonly serviceAccounts: ServiceAccounts
  readonly logger: Logger
  /** `/.well-known/jwks.json`, serialised once. */
  readonly jwksJson: string
  /** `/openapi.json`, serialised once. */
  readonly openApiJson: string
  readonly maxBodyBytes: number
}

type Handler = (req: IncomingMessage, res: ServerResponse) => Promise<void> | void

const ID = new RegExp(ID_PATTERN_SOURCE)
const NO_STORE = { 'cache-control': 'no-store' }
const newServiceAccountCheck = compileBodyCheck(NewServiceAccountSchema, 'service account')

/**
 * The store's route table. Every segment of a `/v2/` path is checked against the id pattern on
 * the raw path, before anything else, so `.`, `..`, `%2F` and empty segments are 400.
 *
 *   GET|HEAD|PUT /v2/projects/{project_id}/apps/{app_id}/builds/{build_id}
 *   GET|POST     /v2/projects/{project_id}/service-accounts
 *   DELETE       /v2/projects/{project_id}/service-accounts/{id}
 *   GET|HEAD     /.well-known/jwks.json, /.well-known/revoked-tokens, /openapi.json, /healthz
 */
export function createStoreHandler (deps: StoreRouteDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const { auth, builds, serviceAccounts, logger } = deps
  const healthJson = JSON.stringify({ status: 'ok' })

  const getBuild = async (req: IncomingMessage, res: ServerResponse, key: BuildKey): Promise<void> => {
    await auth.authorizeRead(req.headers.authorization, key.projectId)
    const json = await builds.get(key)
    if (json === undefined) throw new BuildNotFoundError()
    sendJson(res, 200, json)
  }

  const putBuild = async (req: IncomingMessage, res: ServerResponse, key: BuildKey): Promise<void> => {
    auth.requireAdmin(req.headers.authorization)
    const fields = parseBuildInput(await readJsonBody(req, deps.maxBodyBytes), key)
    const stored = await builds.put(key, fields)
    logger.info({ projectId: key.projectId, appId: key.appId, buildId: key.buildId, created: stored.created }, 'build stored')
    sendJson(res, stored.created ? 201 : 200, stored.json)
  }

  const listServiceAccounts = async (req: IncomingMessage, res: ServerResponse, projectId: string): Promise<void> => {
    auth.requireAdmin(req.headers.authorization)
    sendJson(res, 200, JSON.stringify({ serviceAccounts: await serviceAccounts.list(projectId) }))
  }

  const createServiceAccount = async (req: IncomingMessage, res: ServerResponse, projectId: string): Promise<void> => {
    auth.requireAdmin(req.headers.authorization)
    const input = newServiceAccountCheck.parse(await readJsonBody(req, deps.maxBodyBytes))
    const created = await serviceAccounts.create(projectId, input.name, input.expiresAt)
    logger.info({ projectId, serviceAccountId: created.id, expiresAt: created.expiresAt }, 'service account created')
    sendJson(res, 201, JSON.stringify(created), NO_STORE)
  }

  const deleteServiceAccount = async (req: IncomingMessage, res: ServerResponse, projectId: string, id: string): Promise<void> => {
    auth.requireAdmin(req.headers.authorization)
    if (!await serviceAccounts.revoke(projectId, id)) throw new ServiceAccountNotFoundError()
    logger.info({ projectId, serviceAccountId: id }, 'service account revoked')
    res.writeHead(204).end()
  }

  const revokedTokens = async (_req: IncomingMessage, res: ServerResponse): Promise<void> => {
    sendJson(res, 200, JSON.stringify({ revoked: await serviceAccounts.revokedTokens() }), NO_STORE)
  }

  const fixedRoutes = new Map<string, Handler>([
    ['/healthz', (_req, res) => { sendJson(res, 200, healthJson) }],
    ['/openapi.json', (_req, res) => { sendJson(res, 200, deps.openApiJson) }],
    ['/.well-known/jwks.json', (_req, res) => { sendJson(res, 200, deps.jwksJson) }],
    ['/.well-known/revoked-tokens', revokedTokens]
  ])

  function dispatchV2 (req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const segments = path.slice(4).split('/')
    for (const segment of segments) if (!ID.test(segment)) throw new MalformedIdError(segment)
    const [top, projectId = '', collection, id = '', subCollection, buildId = ''] = segments
    const method = req.method
    if (top === 'projects' && collection === 'apps' && subCollection === 'builds' && segments.length === 6) {
      const key: BuildKey = { projectId, appId: id, buildId }
      if (method === 'GET' || method === 'HEAD') return getBuild(req, res, key)
      if (method === 'PUT') return putBuild(req, res, key)
      throw new StoreMethodNotAllowedError('GET, HEAD, PUT')
    }
    if (top === 'projects' && collection === 'service-accounts' && segments.length === 3) {
      if (method === 'GET' || method === 'HEAD') return listServiceAccounts(req, res, projectId)
      if (method === 'POST') return createServiceAccount(req, res, projectId)
      throw new StoreMethodNotAllowedError('GET, HEAD, POST')
    }
    if (top === 'projects' && collection === 'service-accounts' && segments.length === 4) {
      if (method === 'DELETE') return deleteServiceAccount(req, res, projectId, id)
      throw new StoreMethodNotAllowedError('DELETE')
    }
    throw new StoreRouteNotFoundError()
  }

  function dispatch (req: IncomingMessage, res: ServerResponse): Promise<void> | void {
    const url = req.url as string
    const query = url.indexOf('?')
    const path = query === -1 ? url : url.slice(0, query)
    if (path.startsWith('/v2/')) return dispatchV2(req, res, path)
    const fixed = fixedRoutes.get(path)
    if (fixed === undefined) throw new StoreRouteNotFoundError()
    if (req.method !== 'GET' && req.method !== 'HEAD') throw new StoreMethodNotAllowedError('GET, HEAD')
    return fixed(req, res)
  }

  return (req, res) => {
    let done: Promise<void> | void
    try {
      done = dispatch(req, res)
    } catch (error) {
      sendStoreError(res, error, logger)
      return
    }
    if (done !== undefined) done.catch((error: unknown) => { sendStoreError(res, error, logger) })
  }
}
