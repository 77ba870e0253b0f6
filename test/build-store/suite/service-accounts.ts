import type { Test } from 'tap'
import { ISO_UTC } from '../build-fixtures.ts'
import { ADMIN, bearer, JSON_TYPE, messageBody, type SuiteContext } from './context.ts'

/** The service-account routes: create (token once), list (never tokens), revoke, their validation. */
export function serviceAccountTests (t: Test, ctx: SuiteContext): void {
  const { main } = ctx

  t.test('POST returns the token once; GET lists accounts oldest first, never tokens', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/service-accounts`
    const first = await main.request(path, { method: 'POST', headers: ADMIN, body: JSON.stringify({ name: 'ci', expiresAt: '2031-01-01T00:00:00.789+02:00' }) })
    t.equal(first.status, 201)
    t.equal(first.headers['content-type'], JSON_TYPE)
    t.equal(first.headers['cache-control'], 'no-store')
    const one = first.json() as Record<string, string>
    t.same(Object.keys(one), ['id', 'name', 'expiresAt', 'token'])
    t.match(one, { id: /^[0-9a-f-]{36}$/, name: 'ci', expiresAt: '2030-12-31T22:00:00.000Z', token: /^[\w-]+\.[\w-]+\.[\w-]+$/ })
    const second = (await main.request(path, { method: 'POST', headers: ADMIN, body: JSON.stringify({ name: 'deploy bot', expiresAt: '2032-01-01T00:00:00Z' }) })).json() as Record<string, string>

    const list = await main.request(path, { headers: ADMIN })
    t.equal(list.status, 200)
    t.equal(list.headers['content-type'], JSON_TYPE)
    const { serviceAccounts } = list.json() as { serviceAccounts: Array<Record<string, string>> }
    t.same(serviceAccounts.map(a => Object.keys(a)), [['id', 'name', 'expiresAt', 'createdAt'], ['id', 'name', 'expiresAt', 'createdAt']])
    t.match(serviceAccounts, [
      { id: one.id, name: 'ci', expiresAt: '2030-12-31T22:00:00.000Z', createdAt: ISO_UTC },
      { id: second.id, name: 'deploy bot', expiresAt: '2032-01-01T00:00:00.000Z', createdAt: ISO_UTC }
    ])
    t.notOk(list.text.includes(one.token as string) || list.text.includes(second.token as string), 'no token in the list')
    const [stored] = await ctx.backend.database.query<Record<string, unknown>>('SELECT * FROM service_accounts WHERE id = $1', [one.id])
    t.notOk(JSON.stringify(stored).includes((one.token as string).split('.')[2] as string), 'the database keeps no token')
    t.same(Object.keys(stored ?? {}).sort(), ['created_at', 'expires_at', 'id', 'jti', 'name', 'project_id', 'revoked_at'])

    const empty = await main.request(`/v2/projects/${ctx.project()}/service-accounts`, { headers: ADMIN })
    t.equal(empty.text, '{"serviceAccounts":[]}', 'another project sees none of them')
    t.equal((await main.request(`/v2/projects/${p}/service-accounts/${one.id}`, { method: 'DELETE', headers: ADMIN })).status, 204)
    const afterRevoke = (await main.request(path, { headers: ADMIN })).json() as { serviceAccounts: Array<{ id: string }> }
    t.same(afterRevoke.serviceAccounts.map(a => a.id), [second.id], 'a revoked account leaves the list')
    t.match(main.logs.find(line => line.msg === 'service account created' && line.serviceAccountId === one.id), { projectId: p, expiresAt: '2030-12-31T22:00:00.000Z' })
  })

  t.test('DELETE of an unknown account, or of another project\'s: 404', async t => {
    const p = ctx.project()
    const { id } = await main.store.serviceAccounts.create(p, 'mine', new Date(Date.now() + 3600_000))
    for (const path of [`/v2/projects/${p}/service-accounts/no-such-id`, `/v2/projects/${ctx.project()}/service-accounts/${id}`]) {
      const r = await main.request(path, { method: 'DELETE', headers: ADMIN })
      t.equal(r.status, 404, path)
      t.same(r.json(), messageBody('no such service account in this project'))
    }
    t.equal((await main.store.serviceAccounts.list(p)).length, 1, 'still there')
  })

  t.test('POST bodies that are refused with 400, creating nothing', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/service-accounts`
    const soon = new Date(Date.now() + 3600_000).toISOString()
    const cases: Array<[string, string, string]> = [
      ['expiresAt in the past', JSON.stringify({ name: 'x', expiresAt: '2001-01-01T00:00:00Z' }), 'invalid service account: expiresAt must be in the future'],
      ['expiresAt now, cut to seconds', JSON.stringify({ name: 'x', expiresAt: new Date(Math.floor(Date.now() / 1000) * 1000 + 999).toISOString() }), 'invalid service account: expiresAt must be in the future'],
      ['expiresAt not ISO 8601', JSON.stringify({ name: 'x', expiresAt: 'tomorrow' }), 'invalid service account: expiresAt: expected string to match \'date-time\' format'],
      ['expiresAt without a time zone', JSON.stringify({ name: 'x', expiresAt: '2031-01-01T00:00:00' }), 'invalid service account: expiresAt: expected string to match \'date-time\' format'],
      ['expiresAt an impossible date', JSON.stringify({ name: 'x', expiresAt: '2031-02-30T25:00:00Z' }), 'invalid service account: expiresAt: expected string to match \'date-time\' format'],
      ['expiresAt a number', JSON.stringify({ name: 'x', expiresAt: 1924992000 }), 'invalid service account: expiresAt: expected string'],
      ['no name', JSON.stringify({ expiresAt: soon }), 'invalid service account: name: expected required property'],
      ['an empty name', JSON.stringify({ name: '', expiresAt: soon }), 'invalid service account: name: expected string length greater or equal to 1'],
      ['an unknown field', JSON.stringify({ name: 'x', expiresAt: soon, scopes: ['all'] }), 'invalid service account: unknown field "scopes"'],
      ['not an object', '["x"]', 'invalid service account: the body must be a JSON object (expected object)'],
      ['invalid JSON', '{"name": "x",', 'invalid JSON: '],
      ['an empty body', '', 'invalid JSON: the body is empty']
    ]
    for (const [name, body, message] of cases) {
      const r = await main.request(path, { method: 'POST', headers: ADMIN, body })
      t.equal(r.status, 400, name)
      t.equal(r.headers['content-type'], JSON_TYPE, name)
      const answer = r.json() as { message: string }
      t.same(Object.keys(answer), ['message'], name)
      if (message.endsWith(': ')) t.ok(answer.message.startsWith(message), `${name}: ${answer.message}`)
      else t.equal(answer.message, message, name)
    }
    t.equal((await main.store.serviceAccounts.list(p)).length, 0, 'nothing created')
  })

  t.test('in-process create: a Date or an ISO string, checked the same way', async t => {
    const p = ctx.project()
    const created = await main.store.serviceAccounts.create(p, 'demo', '2033-03-03T03:03:03.999Z')
    t.equal(created.expiresAt, '2033-03-03T03:03:03.000Z', 'cut to whole seconds, as exp is')
    await t.rejects(main.store.serviceAccounts.create(p, 'demo', 'soon'), { status: 400, message: 'invalid service account: expiresAt: expected an ISO 8601 time such as 2030-01-01T00:00:00Z' })
    await t.rejects(main.store.serviceAccounts.create(p, 'demo', new Date(Date.now() - 1000)), { status: 400, message: 'invalid service account: expiresAt must be in the future' })
    await t.rejects(main.store.serviceAccounts.create(p, '', new Date(Date.now() + 60_000)), { status: 400, message: 'invalid service account: name must not be empty' })
    t.equal((await main.store.serviceAccounts.list(p)).length, 1)
  })

  t.test('admin routes without the admin token: 401, nothing done', async t => {
    const p = ctx.project()
    const { token, id } = await main.store.serviceAccounts.create(p, 'reader', new Date(Date.now() + 3600_000))
    const calls: Array<[string, string, string | undefined]> = [
      ['PUT', `/v2/projects/${p}/apps/app/builds/b`, '{}'],
      ['POST', `/v2/projects/${p}/service-accounts`, JSON.stringify({ name: 'x', expiresAt: '2031-01-01T00:00:00Z' })],
      ['GET', `/v2/projects/${p}/service-accounts`, undefined],
      ['DELETE', `/v2/projects/${p}/service-accounts/${id}`, undefined]
    ]
    const credentials: Array<[string, Record<string, string>, string]> = [
      ['none', {}, 'missing bearer token'],
      ['a wrong admin token', bearer('wrong-admin-token-0123456789'), 'this route needs the admin token'],
      ['a service-account token of the project', bearer(token), 'this route needs the admin token'],
      ['a malformed header', { authorization: 'Bearer' }, 'invalid token: Authorization must be "Bearer <token>"']
    ]
    for (const [method, path, body] of calls) {
      for (const [who, headers, message] of credentials) {
        const r = await main.request(path, { method, headers, body })
        t.equal(r.status, 401, `${method} ${path} with ${who}`)
        t.equal(r.headers['www-authenticate'], 'Bearer realm="build-store"')
        t.same(r.json(), messageBody(message))
      }
    }
    t.equal((await main.request(`/v2/projects/${p}/apps/app/builds/b`, { headers: ADMIN })).status, 404, 'no build written')
    t.same((await main.store.serviceAccounts.list(p)).map(a => a.id), [id], 'no account created or revoked')
  })

  t.test('without ADMIN_TOKEN the write routes are disabled (401); reads with a token still work', async t => {
    const readOnly = await ctx.startStore({ ADMIN_TOKEN: '' })
    t.teardown(() => readOnly.close())
    const p = ctx.project()
    await main.request(`/v2/projects/${p}/apps/app/builds/b`, { method: 'PUT', headers: ADMIN, body: '{}' })
    const put = await readOnly.request(`/v2/projects/${p}/apps/app/builds/b`, { method: 'PUT', headers: ADMIN, body: '{}' })
    t.equal(put.status, 401)
    t.same(put.json(), messageBody('write routes are disabled: ADMIN_TOKEN is not set'))
    const list = await readOnly.request(`/v2/projects/${p}/service-accounts`, { headers: ADMIN })
    t.equal(list.status, 401)
    const adminRead = await readOnly.request(`/v2/projects/${p}/apps/app/builds/b`, { headers: ADMIN })
    t.equal(adminRead.status, 401, 'the old admin token is no token at all')
    const { token } = await readOnly.store.serviceAccounts.create(p, 'reader', new Date(Date.now() + 60_000))
    t.equal((await readOnly.request(`/v2/projects/${p}/apps/app/builds/b`, { headers: bearer(token) })).status, 200)
  })
}
