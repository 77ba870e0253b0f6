import Ajv2020 from 'ajv/dist/2020.js'
import type { Test } from 'tap'
import { isDateTime } from '../../../src/build-store/schema-check.ts'
import { FULL_BUILD } from '../build-fixtures.ts'
import { ADMIN, bearer, JSON_TYPE, type SuiteContext } from './context.ts'

interface Operation { operationId: string, tags: string[], responses: Record<string, { content?: Record<string, { schema: unknown }> }> }
type OpenApi = { openapi: string, info: { version: string }, paths: Record<string, Record<string, Operation>> }

/** Every route of the store table of docs/routes.md, "Build store (`build-store`)", as method and path template. */
const SPEC_ROUTES: Array<[string, string]> = [
  ['get', '/v2/projects/{project_id}/apps/{app_id}/builds/{build_id}'],
  ['put', '/v2/projects/{project_id}/apps/{app_id}/builds/{build_id}'],
  ['post', '/v2/projects/{project_id}/service-accounts'],
  ['get', '/v2/projects/{project_id}/service-accounts'],
  ['delete', '/v2/projects/{project_id}/service-accounts/{service_account_id}'],
  ['get', '/.well-known/revoked-tokens'],
  ['get', '/.well-known/jwks.json'],
  ['get', '/openapi.json'],
  ['get', '/healthz']
]

/** `/openapi.json` documents every route, and real responses match the schemas it gives for them. */
export function openApiTests (t: Test, ctx: SuiteContext): void {
  const { main } = ctx

  t.test('GET /openapi.json: OpenAPI 3.1, version 1.0.0, getBuild under Builds, every route of the SPEC', async t => {
    const r = await main.request('/openapi.json')
    t.equal(r.status, 200)
    t.equal(r.headers['content-type'], JSON_TYPE)
    const doc = r.json() as OpenApi
    t.equal(doc.openapi, '3.1.0')
    t.equal(doc.info.version, '1.0.0')
    const getBuild = doc.paths['/v2/projects/{project_id}/apps/{app_id}/builds/{build_id}']?.get
    t.equal(getBuild?.operationId, 'getBuild')
    t.same(getBuild?.tags, ['Builds'])
    t.same(Object.keys(getBuild?.responses ?? {}).sort(), ['200', '400', '401', '403', '404'])
    const documented = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).filter(key => key !== 'parameters').map(method => `${method} ${path}`))
    t.same(documented.sort(), SPEC_ROUTES.map(([method, path]) => `${method} ${path}`).sort(), 'exactly the routes of the SPEC')
  })

  t.test('real responses of every route match the document\'s schemas', async t => {
    const doc = (await main.request('/openapi.json')).json() as OpenApi
    const ajv = new Ajv2020.default({ strict: false, allErrors: true })
    ajv.addFormat('date-time', isDateTime)
    ajv.addSchema(doc, 'openapi')
    let checked = 0
    const check = (method: string, template: string, status: number, body: string): void => {
      const response = doc.paths[template]?.[method]?.responses[String(status)]
      t.ok(response, `${method} ${template} documents ${status}`)
      const schema = response?.content?.['application/json']?.schema
      if (schema === undefined) {
        t.equal(body, '', `${method} ${template} ${status}: no body, none documented`)
        return
      }
      const validate = ajv.compile({ $ref: `openapi#/paths/${template.replaceAll('~', '~0').replaceAll('/', '~1').replaceAll('{', '%7B').replaceAll('}', '%7D')}/${method}/responses/${status}/content/application~1json/schema` })
      const valid = validate(JSON.parse(body))
      t.ok(valid, `${method} ${template} ${status} matches: ${ajv.errorsText(validate.errors)}`)
      checked++
    }

    const p = ctx.project()
    const build = `/v2/projects/${p}/apps/app/builds/b`
    const buildTemplate = '/v2/projects/{project_id}/apps/{app_id}/builds/{build_id}'
    const accounts = `/v2/projects/${p}/service-accounts`
    const accountsTemplate = '/v2/projects/{project_id}/service-accounts'
    const accountTemplate = '/v2/projects/{project_id}/service-accounts/{service_account_id}'

    const created = await main.request(build, { method: 'PUT', headers: ADMIN, body: JSON.stringify(FULL_BUILD) })
    check('put', buildTemplate, created.status, created.text)
    const replaced = await main.request(build, { method: 'PUT', headers: ADMIN, body: JSON.stringify(FULL_BUILD) })
    check('put', buildTemplate, replaced.status, replaced.text)
    const account = await main.request(accounts, { method: 'POST', headers: ADMIN, body: JSON.stringify({ name: 'doc', expiresAt: '2031-01-01T00:00:00Z' }) })
    check('post', accountsTemplate, account.status, account.text)
    const { id, token } = account.json() as { id: string, token: string }
    const got = await main.request(build, { headers: bearer(token) })
    t.equal(got.status, 200)
    check('get', buildTemplate, got.status, got.text)
    for (const headers of [{}, bearer(`${token}x`)]) {
      const refused = await main.request(build, { headers })
      check('get', buildTemplate, refused.status, refused.text)
    }
    const foreign = await main.store.serviceAccounts.create(ctx.project(), 'foreign', '2031-01-01T00:00:00Z')
    for (const [path, headers] of [[build, bearer(foreign.token)], [`/v2/projects/${p}/apps/app/builds/none`, bearer(token)], [`/v2/projects/${p}/apps/app/builds/..`, bearer(token)]] as const) {
      const r = await main.request(path, { headers })
      check('get', buildTemplate, r.status, r.text)
    }
    const badPut = await main.request(build, { method: 'PUT', headers: ADMIN, body: '{"port":"x"}' })
    check('put', buildTemplate, badPut.status, badPut.text)
    const list = await main.request(accounts, { headers: ADMIN })
    check('get', accountsTemplate, list.status, list.text)
    const unauthorised = await main.request(accounts, {})
    check('get', accountsTemplate, unauthorised.status, unauthorised.text)
    const deleted = await main.request(`${accounts}/${id}`, { method: 'DELETE', headers: ADMIN })
    check('delete', accountTemplate, deleted.status, deleted.text)
    const missing = await main.request(`${accounts}/${id}`, { method: 'DELETE', headers: ADMIN })
    check('delete', accountTemplate, missing.status, missing.text)
    for (const path of ['/.well-known/revoked-tokens', '/.well-known/jwks.json', '/openapi.json', '/healthz']) {
      const r = await main.request(path)
      check('get', path, r.status, r.text)
    }
    t.equal(checked, 17, 'every response above was checked against a schema')

    const withNull = ajv.compile({ $ref: 'openapi#/components/schemas/Build' })
    t.notOk(withNull({ ...FULL_BUILD, initError: null }), 'the document refuses null for an omitted field')
    t.notOk(withNull({ ...FULL_BUILD, buildTimeMs: 84213 }), 'and a number for buildTimeMs')
    t.notOk(withNull({ ...FULL_BUILD, color: 'blue' }), 'and unknown fields')
  })
}
