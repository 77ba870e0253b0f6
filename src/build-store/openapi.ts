import type { TSchema } from '@sinclair/typebox'
import {
  CreatedServiceAccountSchema, ErrorBodySchema, HealthSchema, JwksSchema, NewServiceAccountSchema,
  RevokedTokensSchema, ServiceAccountListSchema, ServiceAccountSchema
} from './api-schemas.ts'
import { BuildSchema, ID_PATTERN_SOURCE } from './build-schema.ts'

/** TypeBox schemas are JSON Schema already; this drops TypeBox's symbol keys. */
const plain = (schema: TSchema): Record<string, unknown> => JSON.parse(JSON.stringify(schema)) as Record<string, unknown>
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` })
const json = (name: string) => ({ 'application/json': { schema: ref(name) } })

const ERRORS: Record<string, string> = {
  400: 'A malformed id, invalid JSON or a body that does not match its schema',
  401: 'Token missing, malformed, expired, revoked or not signed by this store (admin routes: not the admin token)',
  403: 'A service-account token of another project',
  404: 'No such resource',
  413: 'Body larger than 1 MiB'
}
const errors = (...statuses: number[]) => Object.fromEntries(statuses.map(status =>
  [String(status), { description: ERRORS[status], content: json('Error') }]))

const idParameter = (name: string, description: string) => ({
  name, in: 'path', required: true, description, schema: { type: 'string', pattern: ID_PATTERN_SOURCE }
})
const projectParameter = idParameter('project_id', 'The project')
const ADMIN = [{ adminToken: [] }]
const ANYONE: never[] = []

/** The OpenAPI 3.1 description of every route of the build store. */
export function buildOpenApiDocument (): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: {
      title: 'build-store',
      version: '1.0.0',
      description: 'The central build store: builds of apps, service accounts and their tokens. Every error body is {"message": string}.'
    },
    tags: [
      { name: 'Builds', description: 'Builds of apps' },
      { name: 'ServiceAccounts', description: 'Service accounts and their tokens (admin)' },
      { name: 'Tokens', description: 'Public token keys and the revocation list, for sidecars' },
      { name: 'Operations', description: 'Health and this document' }
    ],
    paths: {
      '/v2/projects/{project_id}/apps/{app_id}/builds/{build_id}': {
        parameters: [projectParameter, idParameter('app_id', 'The app'), idParameter('build_id', 'The build')],
        get: {
          operationId: 'getBuild',
          tags: ['Builds'],
          summary: 'Get Build',
          description: 'One build with its full configuration and status. Fields not set are omitted.',
          security: [{ serviceAccountToken: [] }, { adminToken: [] }],
          responses: { 200: { description: 'The build', content: json('Build') }, ...errors(400, 401, 403, 404) }
        },
        put: {
          operationId: 'putBuild',
          tags: ['Builds'],
          summary: 'Create or replace a build',
          description: 'id, projectId and modelId come from the path (in the body they must match it); createdAt and updatedAt are set by the store and ignored in the body; unknown fields are refused.',
          security: ADMIN,
          requestBody: { required: true, content: json('Build') },
          responses: {
            200: { description: 'Replaced; the stored build', content: json('Build') },
            201: { description: 'Created; the stored build', content: json('Build') },
            ...errors(400, 401, 413)
          }
        }
      },
      '/v2/projects/{project_id}/service-accounts': {
        parameters: [projectParameter],
        get: {
          operationId: 'listServiceAccounts',
          tags: ['ServiceAccounts'],
          summary: 'List the service accounts of a project (never their tokens)',
          security: ADMIN,
          responses: { 200: { description: 'The accounts not revoked, oldest first', content: json('ServiceAccountList') }, ...errors(400, 401) }
        },
        post: {
          operationId: 'createServiceAccount',
          tags: ['ServiceAccounts'],
          summary: 'Create a service account; its token is shown only in this answer',
          security: ADMIN,
          requestBody: { required: true, content: json('NewServiceAccount') },
          responses: { 201: { description: 'Created, with its token', content: json('CreatedServiceAccount') }, ...errors(400, 401, 413) }
        }
      },
      '/v2/projects/{project_id}/service-accounts/{service_account_id}': {
        parameters: [projectParameter, idParameter('service_account_id', 'The service account')],
        delete: {
          operationId: 'deleteServiceAccount',
          tags: ['ServiceAccounts'],
          summary: 'Revoke a service account and its token, at once',
          security: ADMIN,
          responses: { 204: { description: 'Revoked' }, ...errors(400, 401, 404) }
        }
      },
      '/.well-known/revoked-tokens': {
        get: {
          operationId: 'getRevokedTokens',
          tags: ['Tokens'],
          summary: 'The jti of every revoked, unexpired token of every project',
          security: ANYONE,
          responses: { 200: { description: 'The revocation list', content: json('RevokedTokens') } }
        }
      },
      '/.well-known/jwks.json': {
        get: {
          operationId: 'getJwks',
          tags: ['Tokens'],
          summary: 'The public keys of the token signer',
          security: ANYONE,
          responses: { 200: { description: 'A JSON Web Key Set', content: json('JWKS') } }
        }
      },
      '/openapi.json': {
        get: {
          operationId: 'getOpenApi',
          tags: ['Operations'],
          summary: 'This document',
          security: ANYONE,
          responses: { 200: { description: 'OpenAPI 3.1', content: { 'application/json': { schema: { type: 'object' } } } } }
        }
      },
      '/healthz': {
        get: {
          operationId: 'getHealth',
          tags: ['Operations'],
          summary: 'Liveness',
          security: ANYONE,
          responses: { 200: { description: 'Serving', content: json('Health') } }
        }
      }
    },
    components: {
      schemas: {
        Build: plain(BuildSchema),
        Error: plain(ErrorBodySchema),
        NewServiceAccount: plain(NewServiceAccountSchema),
        ServiceAccount: plain(ServiceAccountSchema),
        ServiceAccountList: { ...plain(ServiceAccountListSchema), properties: { serviceAccounts: { type: 'array', items: ref('ServiceAccount') } } },
        CreatedServiceAccount: plain(CreatedServiceAccountSchema),
        RevokedTokens: plain(RevokedTokensSchema),
        JWKS: plain(JwksSchema),
        Health: plain(HealthSchema)
      },
      securitySchemes: {
        serviceAccountToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A service-account token (EdDSA JWT) of the project' },
        adminToken: { type: 'http', scheme: 'bearer', description: 'The store\'s ADMIN_TOKEN' }
      }
    }
  }
}
