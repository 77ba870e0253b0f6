import t from 'tap'
import { parseRunStoreAddress } from '../../src/config/run-store-address.ts'

const parse = (raw: string): unknown => parseRunStoreAddress('RUN_STORE_URL', raw)

t.test('redis+sentinel://: the sentinels, the master name, the database, the credentials (the password not in the text)', async t => {
  t.same(parse('redis+sentinel://10.0.0.1:26379,sentinel-b:26380/fleet'), {
    topology: 'sentinel', sentinels: [{ host: '10.0.0.1', port: 26379 }, { host: 'sentinel-b', port: 26380 }], master: 'fleet', db: 0, credentials: {}, tls: false, text: 'redis+sentinel://10.0.0.1:26379,sentinel-b:26380/fleet'
  })
  t.same(parse('rediss+sentinel://app:p%40ss@[::1]:26379/my%20master/3'), {
    topology: 'sentinel', sentinels: [{ host: '::1', port: 26379 }], master: 'my master', db: 3, credentials: { username: 'app', password: 'p@ss' }, tls: true, text: 'rediss+sentinel://app@[::1]:26379/my%20master/3'
  })
  t.same(parse('redis+sentinel://:secret@s:1/m'), {
    topology: 'sentinel', sentinels: [{ host: 's', port: 1 }], master: 'm', db: 0, credentials: { password: 'secret' }, tls: false, text: 'redis+sentinel://s:1/m'
  })
})

t.test('redis+cluster://: any nodes as seeds, no database', async t => {
  t.same(parse('redis+cluster://a:7000,b:7001,c:7002'), {
    topology: 'cluster', nodes: [{ host: 'a', port: 7000 }, { host: 'b', port: 7001 }, { host: 'c', port: 7002 }], credentials: {}, tls: false, text: 'redis+cluster://a:7000,b:7001,c:7002'
  })
  t.match(parse('rediss+cluster://u:pw@a:7000/'), { topology: 'cluster', credentials: { username: 'u', password: 'pw' }, tls: true })
})

t.test('a password with an unencoded "/" is read whole, and never shown', async t => {
  t.match(parse('redis+sentinel://app:pa/ss@s:1/m/2'), { topology: 'sentinel', master: 'm', db: 2, credentials: { username: 'app', password: 'pa/ss' }, text: 'redis+sentinel://app@s:1/m/2' })
  t.match(parse('redis+cluster://:a/b@c:7000'), { topology: 'cluster', nodes: [{ host: 'c', port: 7000 }], credentials: { password: 'a/b' }, text: 'redis+cluster://c:7000' })
})

t.test('redis:// and rediss:// stay one server', async t => {
  t.match(parse('redis://:pw@127.0.0.1:6380/2'), { topology: 'single', url: { port: '6380', pathname: '/2', password: 'pw' }, text: 'redis://127.0.0.1:6380/2' })
})

t.test('refused: each with a message naming what is expected, never the password', async t => {
  const cases: Array<[string, RegExp]> = [
    ['http://x:1', /expected redis:\/\/.*redis\+sentinel:\/\/.*redis\+cluster:\/\//],
    ['redis+sentinel://:hunter2@s:26379', /<master name>/],
    ['redis+sentinel://:hunter2@s:26379/m/x', /<master name>\[\/db\]/],
    ['redis+sentinel://:hunter2@s/m', /expected host:port, got "s"/],
    ['redis+cluster://:hunter2@a:1,b:99999', /expected host:port, got "b:99999"/],
    ['redis+cluster://:hunter2@a:1/0', /a cluster has no database/],
    ['redis+cluster://:hunter2@a:1,,b:2', /expected host:port, got ""/],
    ['redis+sentinel://u:%zz@s:1/m', /not URL-encoded/],
    ['redis+sentinel://u:hun/ter2@s/m', /expected host:port, got "s"/],
    ['redis+cluster://u:hunter2/x@a:1,b', /expected host:port, got "b"/],
    ['redis://u:hunter2/x@h:1/0', /expected redis:\/\//],
    ['redis://u:123/hunter2@h:1/0', /expected redis:\/\//]
  ]
  for (const [raw, message] of cases) {
    t.throws(() => parse(raw), { name: 'ConfigError', message }, raw)
    try { parse(raw) } catch (error) { t.notMatch((error as Error).message, /hunter2|hun|ter2/, 'no part of the password') }
  }
})
