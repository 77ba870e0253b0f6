import t from 'tap'
import { RevocationList } from '../../src/auth/revocation-list.ts'
import { eventually, startTestServer } from '../helpers/sidecar-harness.ts'

t.test('fetches at start, refreshes on its interval, keeps the last list while the store is down', async t => {
  let answer: { status: number, body: string } = { status: 200, body: '{"revoked":["a","b"]}' }
  const store = await startTestServer((req, res) => { res.writeHead(answer.status, { 'content-type': 'application/json' }).end(answer.body) })
  t.teardown(() => store.close())
  const list = new RevocationList({ url: new URL(`${store.url}/.well-known/revoked-tokens`), intervalMs: 30 })
  t.teardown(() => { list.stop() })
  await list.start()
  t.equal(store.requests[0]?.url, '/.well-known/revoked-tokens')
  t.equal(list.has('a'), true)
  t.equal(list.has('c'), false)
  t.equal(list.has(undefined), false, 'a token without jti is never revoked')

  answer = { status: 200, body: '{"revoked":["c"]}' }
  await eventually(() => list.has('c'))
  t.equal(list.has('a'), false, 'the new list replaces the old one')

  for (const broken of [{ status: 500, body: '{"revoked":[]}' }, { status: 200, body: 'not json' }, { status: 200, body: '{"revoked":"c"}' }]) {
    answer = broken
    const seen = store.requests.length
    await eventually(() => store.requests.length >= seen + 2)
    t.equal(list.has('c'), true, `kept after ${broken.status} ${broken.body}`)
  }
  const refreshed = list.refreshed
  await store.close()
  await new Promise(resolve => setTimeout(resolve, 100))
  t.equal(list.has('c'), true, 'kept while the store is unreachable')
  t.equal(list.refreshed, refreshed)
})

t.test('entries that are not strings are ignored', async t => {
  const store = await startTestServer((req, res) => { res.writeHead(200).end('{"revoked":["x",1,null,{"a":1}]}') })
  t.teardown(() => store.close())
  const list = new RevocationList({ url: new URL(`${store.url}/r`) })
  await list.refresh()
  t.equal(list.has('x'), true)
  t.equal(list.has('1'), false)
})
