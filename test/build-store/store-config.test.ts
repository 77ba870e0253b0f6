import { resolve } from 'node:path'
import t from 'tap'
import { ConfigError } from '../../src/errors.ts'
import { loadStoreClientConfig, loadStoreConfig, storeHelp } from '../../src/build-store/store-config.ts'

t.test('defaults: the SPEC\'s table', async t => {
  t.same(loadStoreConfig({}), {
    port: 7070,
    host: '0.0.0.0',
    databaseUrl: undefined,
    dataDir: resolve('data'),
    adminToken: undefined,
    logLevel: 'info'
  })
})

t.test('every variable is read; empty counts as unset', async t => {
  t.same(loadStoreConfig({
    PORT: '0', HOST: '127.0.0.1', DATABASE_URL: 'postgres://user:pw@db.internal:5432/store?sslmode=require',
    DATA_DIR: '/var/lib/store', ADMIN_TOKEN: 'abcdefghijklmnop-._~+/==', LOG_LEVEL: 'warn'
  }), {
    port: 0,
    host: '127.0.0.1',
    databaseUrl: 'postgres://user:pw@db.internal:5432/store?sslmode=require',
    dataDir: '/var/lib/store',
    adminToken: 'abcdefghijklmnop-._~+/==',
    logLevel: 'warn'
  })
  t.equal(loadStoreConfig({ DATA_DIR: 'rel/dir' }).dataDir, resolve('rel/dir'), 'DATA_DIR is made absolute')
  t.equal(loadStoreConfig({ DATABASE_URL: 'postgresql://h/db' }).databaseUrl, 'postgresql://h/db')
  t.equal(loadStoreConfig({ PORT: '', ADMIN_TOKEN: '' }).port, 7070)
})

t.test('an invalid value: a ConfigError naming the variable (never echoing a secret)', async t => {
  const cases: Array<[string, string, RegExp]> = [
    ['PORT', 'seventy', /^PORT: expected a whole number from 0 to 65535, got "seventy"$/],
    ['PORT', '65536', /^PORT: /],
    ['DATABASE_URL', 'mysql://root:secret@db/x', /^DATABASE_URL: expected a URL like postgres:\/\/user:password@host:5432\/database$/],
    ['DATABASE_URL', 'not a url', /^DATABASE_URL: /],
    ['ADMIN_TOKEN', 'short', /^ADMIN_TOKEN: expected at least 16 characters, got 5$/],
    ['ADMIN_TOKEN', 'has a space in it, long enough', /^ADMIN_TOKEN: expected letters, digits and - \. _ ~ \+ \/ \(then = padding\), without spaces$/],
    ['LOG_LEVEL', 'loud', /^LOG_LEVEL: expected one of fatal, error, warn, info, debug, trace, silent, got "loud"$/]
  ]
  for (const [name, value, message] of cases) {
    const error = t.throws(() => loadStoreConfig({ [name]: value })) as ConfigError
    t.ok(error instanceof ConfigError, name)
    t.equal(error.variable, name)
    t.match(error.message, message)
    if (name !== 'PORT' && name !== 'LOG_LEVEL') t.notOk(error.message.includes(value), `${name}: the value is not echoed`)
  }
})

t.test('the sub-commands\' configuration: STORE_URL (default) and ADMIN_TOKEN (required)', async t => {
  const config = loadStoreClientConfig({ ADMIN_TOKEN: 'abcdefghijklmnop' })
  t.equal(config.storeUrl.href, 'http://127.0.0.1:7070/')
  t.equal(config.adminToken, 'abcdefghijklmnop')
  t.equal(loadStoreClientConfig({ ADMIN_TOKEN: 'abcdefghijklmnop', STORE_URL: 'https://store.internal/base' }).storeUrl.href, 'https://store.internal/base')
  t.throws(() => loadStoreClientConfig({}), { variable: 'ADMIN_TOKEN', message: 'ADMIN_TOKEN: must be set to the store\'s admin token' })
  t.throws(() => loadStoreClientConfig({ ADMIN_TOKEN: 'abcdefghijklmnop', STORE_URL: 'ftp://x' }), { variable: 'STORE_URL', message: 'STORE_URL: expected an http:// or https:// URL, got "ftp://x"' })
})

t.test('--help: sub-commands, variables with defaults, routes', async t => {
  const help = storeHelp()
  t.match(help, /^build-store: /)
  for (const name of ['PORT', 'HOST', 'DATABASE_URL', 'DATA_DIR', 'ADMIN_TOKEN', 'LOG_LEVEL', 'STORE_URL']) t.match(help, new RegExp(`^  ${name} `, 'm'), name)
  t.match(help, /^ {2}PORT +7070 /m)
  t.match(help, /^ {2}DATA_DIR +\.\/data /m)
  for (const command of ['create-service-account', 'list-service-accounts', 'revoke-service-account', 'put-build']) t.match(help, `build-store ${command} `)
  t.match(help, '/.well-known/revoked-tokens')
})
