import type { Test } from 'tap'
import { BUILD_FIELD_ORDER } from '../../../src/build-store/build-schema.ts'
import { FULL_BUILD, ISO_UTC } from '../build-fixtures.ts'
import { ADMIN, bearer, JSON_TYPE, messageBody, type SuiteContext } from './context.ts'

/** PUT and Get Build: create, replace, every field with its type, omitted fields, caching. */
export function buildTests (t: Test, ctx: SuiteContext): void {
  const { main } = ctx

  t.test('PUT creates (201) then replaces (200); Get Build returns exactly the stored Build', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app-1/builds/b-1`
    const created = await main.request(path, { method: 'PUT', headers: ADMIN, body: JSON.stringify({ status: 'building', port: 8080, buildTimeMs: '12' }) })
    t.equal(created.status, 201)
    t.equal(created.headers['content-type'], JSON_TYPE)
    t.equal(created.headers['content-length'], String(created.body.length))
    const first = created.json() as Record<string, string>
    t.match(first.createdAt, ISO_UTC)
    t.equal(first.updatedAt, first.createdAt, 'a new build: updatedAt is createdAt')
    t.equal(created.text, JSON.stringify({ id: 'b-1', modelId: 'app-1', projectId: p, status: 'building', createdAt: first.createdAt, updatedAt: first.createdAt, buildTimeMs: '12', port: 8080 }),
      'ids from the path, fields in the Build table\'s order')

    const read = await main.request(path, { headers: ADMIN })
    t.equal(read.status, 200)
    t.equal(read.headers['content-type'], JSON_TYPE)
    t.equal(read.text, created.text)

    await new Promise(resolve => setTimeout(resolve, 5))
    const replaced = await main.request(path, { method: 'PUT', headers: ADMIN, body: JSON.stringify({ status: 'success', createdAt: '1999-01-01T00:00:00.000Z', updatedAt: 'whenever' }) })
    t.equal(replaced.status, 200)
    const second = replaced.json() as Record<string, string>
    t.same(Object.keys(second), ['id', 'modelId', 'projectId', 'status', 'createdAt', 'updatedAt'], 'a replace drops the fields not sent')
    t.equal(second.createdAt, first.createdAt, 'createdAt survives a replace; the body\'s is ignored')
    t.match(second.updatedAt, ISO_UTC)
    t.ok(String(second.updatedAt) > String(first.createdAt), 'updatedAt moves on; the body\'s is ignored')
    const reread = await main.request(path, { headers: ADMIN })
    t.equal(reread.text, replaced.text, 'a read after a replace sees the new build')
    t.match(main.logs.filter(line => line.msg === 'build stored'), [
      { projectId: p, appId: 'app-1', buildId: 'b-1', created: true },
      { projectId: p, appId: 'app-1', buildId: 'b-1', created: false }
    ])
  })

  t.test('every field of the seed\'s Build table round-trips with its type', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/full`
    const put = await main.request(path, { method: 'PUT', headers: ADMIN, body: JSON.stringify({ id: 'full', projectId: p, modelId: 'app', ...FULL_BUILD }) })
    t.equal(put.status, 201)
    const read = await main.request(path, { headers: ADMIN })
    const build = read.json() as Record<string, unknown>
    t.same(Object.keys(build), BUILD_FIELD_ORDER, 'every field, in order')
    t.same(build, { ...FULL_BUILD, id: 'full', projectId: p, modelId: 'app', createdAt: build.createdAt, updatedAt: build.updatedAt })
    t.equal(typeof build.buildTimeMs, 'string')
    t.equal(typeof build.initTimeMs, 'string')
    t.equal(build.imageSizeBytes, 4831838208, 'integers beyond 32 bits survive')
    t.equal(read.text, put.text)
  })

  t.test('fields not set are absent, never null', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/bare`
    t.equal((await main.request(path, { method: 'PUT', headers: ADMIN, body: '{}' })).status, 201)
    const read = await main.request(path, { headers: ADMIN })
    const build = read.json() as Record<string, unknown>
    t.same(Object.keys(build), ['id', 'modelId', 'projectId', 'createdAt', 'updatedAt'])
    t.notOk(read.text.includes('null'))
  })

  t.test('HEAD on a build: the headers of the GET, no body', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/b`
    const put = await main.request(path, { method: 'PUT', headers: ADMIN, body: '{"status":"ok"}' })
    const head = await main.request(path, { method: 'HEAD', headers: ADMIN })
    t.equal(head.status, 200)
    t.equal(head.headers['content-length'], String(put.body.length))
    t.equal(head.body.length, 0)
  })

  t.test('404 when no such build exists in that project and app', async t => {
    const p = ctx.project()
    await main.request(`/v2/projects/${p}/apps/app/builds/b`, { method: 'PUT', headers: ADMIN, body: '{}' })
    const { token } = await main.store.serviceAccounts.create(p, 'reader', new Date(Date.now() + 3600_000))
    for (const path of [`/v2/projects/${p}/apps/app/builds/other`, `/v2/projects/${p}/apps/other/builds/b`]) {
      const r = await main.request(path, { headers: bearer(token) })
      t.equal(r.status, 404, path)
      t.equal(r.headers['content-type'], JSON_TYPE)
      t.same(r.json(), messageBody('no such build in this project and app'))
    }
    const otherProject = await main.request(`/v2/projects/${ctx.project()}/apps/app/builds/b`, { headers: ADMIN })
    t.equal(otherProject.status, 404, 'the same ids in another project')
  })

  t.test('concurrent PUTs of a new build: exactly one creates it', async t => {
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/race`
    const results = await Promise.all(Array.from({ length: 6 }, (_, i) =>
      main.request(path, { method: 'PUT', headers: ADMIN, body: JSON.stringify({ status: `s${i}` }) })))
    t.same(results.map(r => r.status).sort(), [200, 200, 200, 200, 200, 201])
    const createdAt = new Set(results.map(r => (r.json() as { createdAt: string }).createdAt))
    t.equal(createdAt.size, 1, 'one createdAt for all')
  })

  t.test('the build cache: embedded keeps JSON in memory within its byte budget; PostgreSQL reads through', async t => {
    const small = await ctx.startStore({}, { buildCacheBytes: 450 })
    t.teardown(() => small.close())
    const p = ctx.project()
    for (const id of ['c1', 'c2', 'c3']) {
      t.equal((await small.request(`/v2/projects/${p}/apps/app/builds/${id}`, { method: 'PUT', headers: ADMIN, body: JSON.stringify({ status: 'x'.repeat(60) }) })).status, 201)
    }
    t.equal(small.store.builds.cachedBuilds, ctx.backend.kind === 'embedded' ? 2 : 0)
    const big = await small.request(`/v2/projects/${p}/apps/app/builds/big`, { method: 'PUT', headers: ADMIN, body: JSON.stringify({ status: 'x'.repeat(500) }) })
    t.equal(big.status, 201, 'a build larger than the whole budget is stored, not cached')
    for (const id of ['c1', 'c2', 'c3', 'big']) {
      const r = await small.request(`/v2/projects/${p}/apps/app/builds/${id}`, { headers: ADMIN })
      t.equal(r.status, 200, `${id} still readable`)
    }
    t.ok(small.store.builds.cachedBuilds <= 2)
  })
}
