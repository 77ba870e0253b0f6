import { createServer } from 'node:net'
import type { Test } from 'tap'
import type { Database } from '../../../src/build-store/database.ts'
import { MIGRATIONS, migrate } from '../../../src/build-store/migrations.ts'
import { loadStoreConfig } from '../../../src/build-store/store-config.ts'
import { startBuildStore } from '../../../src/build-store/store-server.ts'
import { ADMIN, ADMIN_TOKEN, bearer, startTestStore, type SuiteContext } from './context.ts'

/** Migrations, the database's transactions, restarts on the same database, start-up failures. */
export function lifecycleTests (t: Test, ctx: SuiteContext): void {
  const { backend } = ctx

  t.test('migrations are recorded once; applying them again does nothing', async t => {
    const rows = await backend.database.query<{ version: number, name: string }>('SELECT version, name FROM schema_migrations ORDER BY version')
    t.same(rows, MIGRATIONS.map(m => ({ version: m.version, name: m.name })))
    t.same(await migrate(backend.database), [])
    const next = { version: 99, name: 'a later change', statements: ['CREATE TABLE later_change (id integer)', 'INSERT INTO later_change VALUES (1)'] }
    t.same(await migrate(backend.database, [...MIGRATIONS, next]), [99], 'only the new one is applied')
    t.same(await backend.database.query('SELECT id FROM later_change'), [{ id: 1 }])
    await backend.database.query('DROP TABLE later_change')
    await backend.database.query('DELETE FROM schema_migrations WHERE version = 99')
  })

  t.test('a failing migration leaves nothing behind (one transaction)', async t => {
    const broken = { version: 98, name: 'broken', statements: ['CREATE TABLE half_done (id integer)', 'SELECT no_such_column FROM half_done'] }
    await t.rejects(migrate(backend.database, [...MIGRATIONS, broken]))
    const tables = await backend.database.query("SELECT 1 FROM information_schema.tables WHERE table_name = 'half_done'")
    t.equal(tables.length, 0, 'the table was rolled back')
    const versions = await backend.database.query('SELECT 1 FROM schema_migrations WHERE version = 98')
    t.equal(versions.length, 0)
  })

  t.test('transaction(): committed on success, rolled back on a throw', async t => {
    const id = `tx-${ctx.project()}`
    const result = await backend.database.transaction(async tx => {
      await tx.query("INSERT INTO service_accounts (id, project_id, name, jti, expires_at, created_at) VALUES ($1, 'tx', 'tx', $1, now(), now())", [id])
      return 'done'
    })
    t.equal(result, 'done')
    await t.rejects(backend.database.transaction(async tx => {
      await tx.query('DELETE FROM service_accounts WHERE id = $1', [id])
      throw new Error('changed my mind')
    }), { message: 'changed my mind' })
    t.equal((await backend.database.query('SELECT 1 FROM service_accounts WHERE id = $1', [id])).length, 1, 'the delete was rolled back')
    await backend.database.query('DELETE FROM service_accounts WHERE id = $1', [id])
  })

  t.test('a restart on the same database keeps the key, the builds, the tokens and the revocations', async t => {
    const first = await ctx.startStore()
    const p = ctx.project()
    const path = `/v2/projects/${p}/apps/app/builds/b`
    const put = await first.request(path, { method: 'PUT', headers: ADMIN, body: '{"status":"kept"}' })
    const kept = await first.store.serviceAccounts.create(p, 'kept', new Date(Date.now() + 3600_000))
    const gone = await first.store.serviceAccounts.create(p, 'gone', new Date(Date.now() + 3600_000))
    t.equal(await first.store.serviceAccounts.revoke(p, gone.id), true)
    const jwks = (await first.request('/.well-known/jwks.json')).text
    await first.close()

    const second = await ctx.startStore()
    t.teardown(() => second.close())
    t.equal(second.store.signer.kid, first.store.signer.kid, 'one key, made once')
    t.equal((await second.request('/.well-known/jwks.json')).text, jwks)
    const read = await second.request(path, { headers: bearer(kept.token) })
    t.equal(read.status, 200, 'a token from before the restart still works')
    t.equal(read.text, put.text)
    const revoked = await second.request(path, { headers: bearer(gone.token) })
    t.equal(revoked.status, 401, 'a revocation from before the restart still holds')
    t.same(revoked.json(), { message: 'invalid token: revoked' })
  })

  t.test('start-up fails cleanly when the port is taken; the shared database stays open', async t => {
    const busy = createServer()
    await new Promise<void>(resolve => busy.listen(0, '127.0.0.1', resolve))
    t.teardown(() => new Promise(resolve => busy.close(resolve)))
    const port = (busy.address() as { port: number }).port
    const config = loadStoreConfig({ PORT: String(port), HOST: '127.0.0.1', ADMIN_TOKEN, LOG_LEVEL: 'silent' })
    await t.rejects(startBuildStore(config, { database: backend.database }), { code: 'EADDRINUSE' })
    t.same(await backend.database.query('SELECT 1 AS one'), [{ one: 1 }], 'not closed: the store did not open it')
  })

  t.test('a database failure is a logged 500 {"message":"internal error"}, and the store keeps serving', async t => {
    let failing = false
    const flaky: Database = {
      ...backend.database,
      query: (sql, params) => failing ? Promise.reject(new Error('connection terminated unexpectedly')) : backend.database.query(sql, params)
    }
    const store = await startTestStore({ ...backend, database: flaky }, {}, { buildCacheBytes: 0 })
    t.teardown(() => store.close())
    const p = ctx.project()
    await store.request(`/v2/projects/${p}/apps/app/builds/b`, { method: 'PUT', headers: ADMIN, body: '{}' })
    failing = true
    for (const [method, path] of [['GET', `/v2/projects/${p}/apps/app/builds/b`], ['PUT', `/v2/projects/${p}/apps/app/builds/b`], ['GET', '/.well-known/revoked-tokens']]) {
      const r = await store.request(path as string, { method, headers: ADMIN, body: method === 'PUT' ? '{}' : undefined })
      t.equal(r.status, 500, `${method} ${path}`)
      t.equal(r.headers['content-type'], 'application/json; charset=utf-8')
      t.same(r.json(), { message: 'internal error' })
    }
    const logged = store.logs.filter(line => line.msg === 'request failed')
    t.equal(logged.length, 3)
    t.match(logged[0], { level: 50, err: { message: 'connection terminated unexpectedly' } })
    failing = false
    t.equal((await store.request(`/v2/projects/${p}/apps/app/builds/b`, { headers: ADMIN })).status, 200, 'served again once the database is back')
  })

  // PGlite allows one instance per DATA_DIR, which this suite's shared store holds: for the
  // embedded backend the bin test (test/bin/build-store.test.ts) covers opening and closing
  if (backend.kind !== 'embedded') t.test('a store opening its own database (DATABASE_URL) closes it on close()', async t => {
    const config = loadStoreConfig({ PORT: '0', HOST: '127.0.0.1', ADMIN_TOKEN, LOG_LEVEL: 'silent', ...backend.env })
    const store = await startBuildStore(config)
    t.equal(store.database.kind, backend.kind)
    t.not(store.database, backend.database)
    t.equal((await fetch(`${store.url}/healthz`)).status, 200)
    await store.close()
    await t.rejects(store.database.query('SELECT 1'), 'closed with the store')
  })
}
