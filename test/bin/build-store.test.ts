import { readdirSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { type Child, runBin } from '../helpers/child-process.ts'
import { send } from '../helpers/http-client.ts'
import { refusedPort as closedPort } from '../helpers/ports.ts'

// the subtests share nothing (each store has a DATA_DIR of its own): two at a time, so that one
// store's start overlaps the other's waits
t.jobs = 2

const ADMIN_TOKEN = 'bin-admin-token-0123456789'

t.test('--help lists the sub-commands and variables and exits 0', async t => {
  const child = runBin('build-store', {}, ['--help'])
  t.equal(await child.exited, 0)
  t.match(child.stdout, /^build-store: /)
  for (const name of ['PORT', 'HOST', 'DATABASE_URL', 'DATA_DIR', 'ADMIN_TOKEN', 'STORE_URL']) t.match(child.stdout, new RegExp(`^  ${name} `, 'm'))
  for (const command of ['create-service-account', 'list-service-accounts', 'revoke-service-account', 'put-build']) t.match(child.stdout, command)
  t.equal(child.stderr, '')
})

t.test('an invalid value stops start-up with one line naming the variable', async t => {
  const cases: Array<[string, string]> = [['PORT', 'seventy'], ['DATABASE_URL', 'mysql://root:hunter2@db/x'], ['ADMIN_TOKEN', 'short'], ['LOG_LEVEL', 'loud']]
  const children = cases.map(([name, value]) => runBin('build-store', { [name]: value }))
  for (const [i, [name, value]] of cases.entries()) {
    const child = children[i] as Child
    t.equal(await child.exited, 2, name)
    const lines = child.stderr.trim().split('\n')
    t.equal(lines.length, 1, 'one line')
    t.match(lines[0], new RegExp(`^build-store: invalid configuration: ${name}: `))
    if (name === 'DATABASE_URL' || name === 'ADMIN_TOKEN') t.notOk(child.stderr.includes(value), 'the secret is not echoed')
    t.equal(child.stdout, '')
  }
})

t.test('PostgreSQL unreachable: one clear line and exit 1', async t => {
  const port = await closedPort()
  const child = runBin('build-store', { PORT: '0', HOST: '127.0.0.1', DATABASE_URL: `postgres://postgres:hunter2@127.0.0.1:${port}/store` })
  t.equal(await child.exited, 1)
  t.match(child.stderr, /^build-store: cannot start: ECONNREFUSED .+\n$/)
  t.notOk(child.stderr.includes('hunter2'))
})

t.test('serve on embedded PostgreSQL in DATA_DIR; the sub-commands work against it; SIGTERM exits 0; a restart keeps everything', async t => {
  const dir = await mkdtemp(join(tmpdir(), 'build-store-bin-'))
  const dataDir = join(dir, 'data')
  const processes: Child[] = []
  t.teardown(async () => {
    for (const child of processes) if (child.process.exitCode === null) child.process.kill('SIGKILL')
    await rm(dir, { recursive: true, force: true })
  })
  const serve = async (): Promise<{ child: Child, base: string }> => {
    const child = runBin('build-store', { PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ADMIN_TOKEN })
    processes.push(child)
    const started = await child.waitForLine(line => line.msg === 'build store listening', 40_000)
    t.match(started, { backend: 'embedded', admin: true, host: '127.0.0.1' })
    return { child, base: `http://127.0.0.1:${started.port as number}` }
  }
  const cli = async (base: string, args: string[]): Promise<Child> => {
    const child = runBin('build-store', { STORE_URL: base, ADMIN_TOKEN }, args)
    await child.exited
    return child
  }

  const { child: server, base } = await serve()
  const buildFile = join(dir, 'build.json')
  await writeFile(buildFile, JSON.stringify({ status: 'success', runtime: 'custom', port: 8192, buildTimeMs: '4200' }))
  const [created, second, put, refused] = await Promise.all([
    cli(base, ['create-service-account', '--project', 'proj', '--name', 'ci', '--expires-at', '2031-01-01T00:00:00Z']),
    cli(base, ['create-service-account', '--project', 'proj', '--name', 'doomed', '--expires-at', '2031-01-01T00:00:00Z']),
    cli(base, ['put-build', '--project', 'proj', '--app', 'app', '--build', 'b-1', '--file', buildFile]),
    cli(base, ['put-build', '--project', 'proj', '--app', 'app', '--build', 'b-2', '--file', join(dir, 'missing.json')])
  ])
  t.equal(created.process.exitCode, 0, created.stderr)
  const account = JSON.parse(created.stdout) as { id: string, name: string, expiresAt: string, token: string }
  t.match(account, { name: 'ci', expiresAt: '2031-01-01T00:00:00.000Z', token: /^ey/ })
  const doomed = JSON.parse(second.stdout) as { id: string, token: string }
  t.equal(put.process.exitCode, 0, put.stderr)
  t.match(JSON.parse(put.stdout), { id: 'b-1', modelId: 'app', projectId: 'proj', status: 'success', runtime: 'custom', port: 8192, buildTimeMs: '4200' })
  t.equal(refused.process.exitCode, 2)
  t.match(refused.stderr, /^build-store: --file: cannot read .*missing\.json: ENOENT\n$/)

  const read = await send(`${base}/v2/projects/proj/apps/app/builds/b-1`, { headers: { authorization: `Bearer ${account.token}` } })
  t.equal(read.status, 200)
  t.equal(read.text, JSON.stringify(JSON.parse(put.stdout)))

  const revoked = await cli(base, ['revoke-service-account', '--project', 'proj', '--id', doomed.id])
  t.equal(revoked.process.exitCode, 0)
  t.same(JSON.parse(revoked.stdout), { id: doomed.id, revoked: true })
  const [listed, again] = await Promise.all([
    cli(base, ['list-service-accounts', '--project', 'proj']),
    cli(base, ['revoke-service-account', '--project', 'proj', '--id', doomed.id])
  ])
  t.same((JSON.parse(listed.stdout) as { serviceAccounts: Array<{ id: string }> }).serviceAccounts.map(a => a.id), [account.id])
  t.equal(again.process.exitCode, 1)
  t.equal(again.stderr, 'build-store: revoke-service-account: 404 no such service account in this project\n')

  server.process.kill('SIGTERM')
  t.equal(await server.exited, 0)
  t.ok(server.lines.some(line => line.msg === 'stopped'))
  for (const secret of [ADMIN_TOKEN, account.token, doomed.token]) t.notOk(server.stdout.includes(secret) || server.stderr.includes(secret), 'no secret in the logs')

  const { child: restarted, base: base2 } = await serve()
  t.notOk(restarted.lines.some(line => line.msg === 'migrations applied'), 'the migrations ran once, at the first start')
  const after = await send(`${base2}/v2/projects/proj/apps/app/builds/b-1`, { headers: { authorization: `Bearer ${account.token}` } })
  t.equal(after.status, 200, 'the key and the build survived the restart')
  t.equal(after.text, read.text)
  const stillRevoked = await send(`${base2}/v2/projects/proj/apps/app/builds/b-1`, { headers: { authorization: `Bearer ${doomed.token}` } })
  t.equal(stillRevoked.status, 401)
  restarted.process.kill('SIGINT')
  t.equal(await restarted.exited, 0)
})

t.test('DATA_DIR is locked: a second store exits 1 naming the holder; after the holder is SIGKILLed the next start takes the lock over and the data is there', async t => {
  const dir = await mkdtemp(join(tmpdir(), 'build-store-lock-'))
  const dataDir = join(dir, 'data')
  const processes: Child[] = []
  t.teardown(async () => {
    for (const child of processes) if (child.process.exitCode === null && child.process.signalCode === null) child.process.kill('SIGKILL')
    await Promise.all(processes.map(child => child.exited))
    await rm(dir, { recursive: true, force: true })
  })
  const listening = (line: Record<string, unknown>): boolean => line.msg === 'build store listening'
  const start = (): Child => {
    const child = runBin('build-store', { PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, ADMIN_TOKEN })
    processes.push(child)
    return child
  }
  const serve = async (): Promise<{ child: Child, base: string }> => {
    const child = start()
    const started = await child.waitForLine(listening, 40_000)
    return { child, base: `http://127.0.0.1:${started.port as number}` }
  }
  const admin = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }
  const buildPath = '/v2/projects/proj/apps/app/builds/b-1'

  const { child: first, base } = await serve()
  const put = await send(`${base}${buildPath}`, { method: 'PUT', headers: admin, body: JSON.stringify({ status: 'success', runtime: 'custom', port: 8192 }) })
  t.equal(put.status, 201, put.text)

  const second = start()
  // without a lock the second store would start and serve: stop it at once so the exit-code check fails fast
  second.process.stdout?.on('data', () => { if (second.lines.some(listening)) second.process.kill('SIGKILL') })
  t.equal(await second.exited, 1, 'the second store on the same folder exits 1')
  t.equal(second.stderr, `build-store: DATA_DIR ${dataDir} is in use by another build-store (pid ${first.process.pid as number})\n`, 'one line naming the folder and the holder\'s pid')
  t.equal(second.stdout, '')
  t.equal((await send(`${base}/healthz`)).status, 200, 'the first keeps serving')

  first.process.kill('SIGKILL')
  t.equal(await first.exited, 'SIGKILL')
  t.same(readdirSync(dataDir).filter(name => name.startsWith('build-store-')), ['build-store-1.pid'], 'SIGKILL left a stale lock behind')

  const { child: third, base: base3 } = await serve()
  t.same(readdirSync(dataDir).filter(name => name.startsWith('build-store-')), ['build-store-2.pid'], 'the stale lock was taken over')
  const read = await send(`${base3}${buildPath}`, { headers: admin })
  t.equal(read.status, 200, 'the build written through the first store is there')
  t.equal(read.text, put.text)
  third.process.kill('SIGTERM')
  t.equal(await third.exited, 0)
  t.same(readdirSync(dataDir).filter(name => name.startsWith('build-store-')), [], 'a clean stop releases the lock')
})
