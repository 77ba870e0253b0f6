import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { type CommandIo, runStoreCommand } from '../../src/build-store/store-cli.ts'
import { startTestServer, type TestServer } from '../helpers/sidecar-harness.ts'

const ADMIN_TOKEN = 'cli-admin-token-0123456789'

/** A fake store that answers each request with the next of `answers` and records it. */
async function fakeStore (t: Test, answers: Array<[number, string]>): Promise<TestServer> {
  const server = await startTestServer((_req, res) => {
    const [status, body] = answers.shift() ?? [500, '{"message":"no more answers"}']
    res.writeHead(status, body === '' ? {} : { 'content-type': 'application/json' }).end(body)
  })
  t.teardown(() => server.close())
  return server
}

function io (env: Record<string, string>, stdin = ''): CommandIo & { out: string, err: string } {
  const state = {
    env: { ADMIN_TOKEN, ...env },
    out: '',
    err: '',
    stdout: (text: string) => { state.out += text },
    stderr: (text: string) => { state.err += text },
    readStdin: async () => stdin
  }
  return state
}

t.test('create-service-account: POSTs name and expiresAt, prints the answer', async t => {
  const answer = { id: 'sa-1', name: 'ci', expiresAt: '2030-01-01T00:00:00.000Z', token: 'a.b.c' }
  const store = await fakeStore(t, [[201, JSON.stringify(answer)]])
  const run = io({ STORE_URL: store.url })
  t.equal(await runStoreCommand(['create-service-account', '--project', 'proj', '--name', 'ci', '--expires-at', '2030-01-01T00:00:00Z'], run), 0)
  const [request] = store.requests
  t.equal(request?.method, 'POST')
  t.equal(request?.url, '/v2/projects/proj/service-accounts')
  t.equal(request?.headers.authorization, `Bearer ${ADMIN_TOKEN}`)
  t.equal(request?.headers['content-type'], 'application/json')
  t.same(JSON.parse(request?.body.toString() ?? ''), { name: 'ci', expiresAt: '2030-01-01T00:00:00Z' })
  t.equal(run.out, `${JSON.stringify(answer, null, 2)}\n`)
  t.equal(run.err, '')
})

t.test('list-service-accounts and revoke-service-account (204: prints what was revoked)', async t => {
  const store = await fakeStore(t, [[200, '{"serviceAccounts":[]}'], [204, '']])
  const run = io({ STORE_URL: `${store.url}/` })
  t.equal(await runStoreCommand(['list-service-accounts', '--project=proj'], run), 0)
  t.equal(await runStoreCommand(['revoke-service-account', '--project', 'proj', '--id', 'sa-1'], run), 0)
  t.same(store.requests.map(r => `${r.method} ${r.url}`), ['GET /v2/projects/proj/service-accounts', 'DELETE /v2/projects/proj/service-accounts/sa-1'])
  t.equal(store.requests[0]?.body.length, 0)
  t.equal(run.out, '{\n  "serviceAccounts": []\n}\n{\n  "id": "sa-1",\n  "revoked": true\n}\n')
})

t.test('put-build: the file (or stdin) is sent as it is; STORE_URL may carry a base path', async t => {
  const dir = await mkdtemp(join(tmpdir(), 'build-store-cli-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const file = join(dir, 'build.json')
  await writeFile(file, '{"status":"ready"}\n')
  const store = await fakeStore(t, [[201, '{"id":"b"}'], [200, '{"id":"b"}']])
  const run = io({ STORE_URL: `${store.url}/base` }, '{"status":"from stdin"}')
  t.equal(await runStoreCommand(['put-build', '--project', 'p', '--app', 'a', '--build', 'b', '--file', file], run), 0)
  t.equal(await runStoreCommand(['put-build', '--project', 'p', '--app', 'a', '--build', 'b', '--file', '-'], run), 0)
  t.same(store.requests.map(r => [r.method, r.url, r.body.toString()]), [
    ['PUT', '/base/v2/projects/p/apps/a/builds/b', '{"status":"ready"}\n'],
    ['PUT', '/base/v2/projects/p/apps/a/builds/b', '{"status":"from stdin"}']
  ])
})

t.test('the store refuses: exit 1, one line with the status and message, nothing on stdout', async t => {
  const store = await fakeStore(t, [[400, '{"message":"invalid build: unknown field \\"x\\""}'], [502, 'Bad Gateway'], [401, '']])
  for (const [expected] of [['build-store: put-build: 400 invalid build: unknown field "x"\n'], ['build-store: put-build: 502 Bad Gateway\n'], ['build-store: put-build: 401 \n']]) {
    const run = io({ STORE_URL: store.url }, '{"x":1}')
    t.equal(await runStoreCommand(['put-build', '--project', 'p', '--app', 'a', '--build', 'b', '--file', '-'], run), 1)
    t.equal(run.err, expected)
    t.equal(run.out, '')
  }
})

t.test('the store cannot be reached: exit 1, one line naming it', async t => {
  const probe = createServer()
  await new Promise<void>(resolve => probe.listen(0, '127.0.0.1', resolve))
  const port = (probe.address() as { port: number }).port
  await new Promise(resolve => probe.close(resolve))
  const run = io({ STORE_URL: `http://127.0.0.1:${port}` })
  t.equal(await runStoreCommand(['list-service-accounts', '--project', 'p'], run), 1)
  t.equal(run.err, `build-store: list-service-accounts: cannot reach the store at http://127.0.0.1:${port}: ECONNREFUSED\n`)
})

t.test('usage and configuration mistakes: exit 2, one line, no request', async t => {
  const store = await fakeStore(t, [])
  const cases: Array<[string[], Record<string, string>, string]> = [
    [['make-coffee'], {}, 'unknown command "make-coffee" (see build-store --help)'],
    [['list-service-accounts'], {}, '--project is required'],
    [['list-service-accounts', '--project', ''], {}, '--project is required'],
    [['list-service-accounts', '--project', 'p', '--name', 'x'], {}, '--name is not an option of this command'],
    [['list-service-accounts', '--project', 'p', '--colour', 'x'], {}, '--colour is not an option of this command'],
    [['list-service-accounts', '--project', 'p', 'extra'], {}, 'unexpected argument "extra"'],
    [['list-service-accounts', '-p', 'x'], {}, 'unexpected argument "-p"'],
    [['list-service-accounts', '--project'], {}, '--project needs a value'],
    [['revoke-service-account', '--project', 'p', '--id', '../x'], {}, '--id: expected an id matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, got "../x"'],
    [['put-build', '--project', 'p', '--app', 'a%2Fb', '--build', 'b', '--file', '-'], {}, '--app: expected an id matching ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, got "a%2Fb"'],
    [['put-build', '--project', 'p', '--app', 'a', '--build', 'b', '--file', '/no/such/build.json'], {}, '--file: cannot read /no/such/build.json: ENOENT'],
    [['list-service-accounts', '--project', 'p'], { ADMIN_TOKEN: '' }, 'ADMIN_TOKEN: must be set to the store\'s admin token'],
    [['list-service-accounts', '--project', 'p'], { STORE_URL: 'store:7070' }, 'STORE_URL: expected an http:// or https:// URL, got "store:7070"']
  ]
  for (const [args, env, message] of cases) {
    const run = io({ STORE_URL: store.url, ...env })
    t.equal(await runStoreCommand(args, run), 2, args.join(' '))
    t.equal(run.err, `build-store: ${message}\n`, args.join(' '))
    t.equal(run.out, '')
  }
  t.equal(store.requests.length, 0, 'no request was sent')
})
