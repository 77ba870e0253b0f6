// What each image installs (the Dockerfile's `npm ci --omit=dev`), done here from the lockfiles,
// offline, into empty folders: the sidecar's install holds its own dependencies only (no PGlite,
// pg, TypeBox, nor the OpenTelemetry SDK, an optional peer) in at most 20 MB, and the sidecar
// runs on it; the build store's package installs and runs on its own, with the versions the
// repository tests.
import { cpSync, existsSync } from 'node:fs'
import { copyFile, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { runNode } from '../helpers/child-process.ts'
import { send } from '../helpers/http-client.ts'
import { runIn, sizeOf } from '../helpers/npm-project.ts'
import { eventually, startTestServer } from '../helpers/sidecar-harness.ts'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const STORE_PACKAGE = join(ROOT, 'packages/build-store')
/** Issue 40's budget for the sidecar's production node_modules (13.3 MB when this was written). */
const MAX_SIDECAR_INSTALL_BYTES = 20e6
/** The build store's packages, and the tracing SDK: none of them in the sidecar's install. */
const NOT_IN_SIDECAR = [
  '@electric-sql/pglite', 'pg', '@sinclair/typebox', '@opentelemetry/sdk-trace', '@opentelemetry/core', '@opentelemetry/resources',
  '@opentelemetry/exporter-trace-otlp-proto', '@opentelemetry/exporter-trace-otlp-http', '@opentelemetry/semantic-conventions'
]
/** The sidecar's own packages: none of them in the build store's install. */
const NOT_IN_STORE = ['undici', 'ioredis', 'prom-client', 'http-proxy', 'ws']

interface Lock { packages: Record<string, { version?: string }> }
async function lockOf (dir: string): Promise<Lock> {
  return JSON.parse(await readFile(join(dir, 'package-lock.json'), 'utf8')) as Lock
}

/** `npm ci --omit=dev` of the manifests in `from`, offline (npm's cache holds what the repository's own `npm ci` fetched). */
async function productionInstall (t: Test, from: string, into: string): Promise<void> {
  await mkdir(into, { recursive: true })
  for (const file of ['package.json', 'package-lock.json']) await copyFile(join(from, file), join(into, file))
  const installed = await runIn(into, 'npm', ['ci', '--omit=dev', '--ignore-scripts', '--offline', '--no-audit', '--no-fund'])
  t.equal(installed.code, 0, `npm ci --omit=dev succeeds${installed.code === 0 ? '' : `: ${installed.stderr}`}`)
}

/** Compiles `tsconfig` into `outDir` as the package's build does. */
async function compile (t: Test, tsconfig: string, outDir: string): Promise<void> {
  const built = await runIn(ROOT, process.execPath, [join(ROOT, 'node_modules/typescript-7/bin/tsc'), '-p', tsconfig, '--outDir', outDir])
  t.equal(built.code, 0, `tsc -p ${tsconfig}${built.code === 0 ? '' : `: ${built.stdout}${built.stderr}`}`)
}

let work: string
t.before(async () => {
  work = await mkdtemp(join(tmpdir(), 'production-install-'))
  t.teardown(async () => { await rm(work, { recursive: true, force: true }) })
})

t.test('the sidecar: its own dependencies only, at most 20 MB, and it runs on them', async t => {
  const dir = join(work, 'sidecar')
  await productionInstall(t, ROOT, dir)
  const modules = join(dir, 'node_modules')
  for (const name of NOT_IN_SIDECAR) t.notOk(existsSync(join(modules, name)), `no ${name}`)
  const bytes = await sizeOf(modules)
  t.ok(bytes <= MAX_SIDECAR_INSTALL_BYTES, `node_modules is ${(bytes / 1e6).toFixed(1)} MB (at most ${MAX_SIDECAR_INSTALL_BYTES / 1e6})`)

  await compile(t, join(ROOT, 'tsconfig.build.json'), join(dir, 'dist'))
  cpSync(join(ROOT, 'src/runs/store/redis/lua'), join(dir, 'dist/runs/store/redis/lua'), { recursive: true })
  // as the image has it: without the build store and the demo that starts it
  for (const path of ['dist/build-store', 'dist/bin/build-store.js', 'dist/demo/start.js']) await rm(join(dir, path), { recursive: true })
  const bin = join(dir, 'dist/bin/app-sidecar.js')

  const app = await startTestServer((req, res) => { res.setHeader('content-type', 'application/json').end('{"ok":true}') })
  t.teardown(() => app.close())
  const sidecar = runNode([bin], { PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', APP_URL: app.url, DISABLE_AUTH: 'true' })
  t.teardown(async () => { sidecar.process.kill('SIGKILL'); await sidecar.exited })
  const started = await sidecar.waitForLine(line => line.msg === 'sidecar listening', 15_000)
  await eventually(async () => (await send(`http://127.0.0.1:${started.adminPort as number}/readyz`)).status === 200)
  const answer = await send(`http://127.0.0.1:${started.port as number}/v4/p/a/predict`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' })
  t.equal(answer.status, 200, 'a call goes through')
  t.same((JSON.parse(answer.body.toString()) as { result: unknown }).result, { ok: true }, 'the app\'s answer, in the envelope')

  // tracing asked for, its packages absent: one line naming the variable and the command that installs them
  const peers = (JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string> }).peerDependencies
  const traced = runNode([bin], { PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', APP_URL: app.url, DISABLE_AUTH: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' })
  t.equal(await traced.exited, 2, 'start refused, exit 2')
  t.equal(traced.stderr, 'app-sidecar: invalid configuration: OTEL_EXPORTER_OTLP_ENDPOINT: tracing needs the OpenTelemetry packages, which the ' +
    `sidecar's install leaves out: npm install ${Object.entries(peers).filter(([name]) => name.startsWith('@opentelemetry/')).map(([n, r]) => `${n}@${r}`).join(' ')}\n`)
  t.notMatch(traced.stdout, /sidecar listening/, 'nothing listened')
})

t.test('the build store: its own package and lockfile, installed and run alone, on the versions the repository tests', async t => {
  const [own, root] = await Promise.all([lockOf(STORE_PACKAGE), lockOf(ROOT)])
  for (const [path, entry] of Object.entries(own.packages)) {
    if (path === '') continue
    t.equal(entry.version, root.packages[path]?.version, `${path}: the version the repository's lockfile holds`)
  }
  const dir = join(work, 'build-store')
  await productionInstall(t, STORE_PACKAGE, dir)
  const modules = join(dir, 'node_modules')
  for (const name of NOT_IN_STORE) t.notOk(existsSync(join(modules, name)), `no ${name}`)
  t.ok(existsSync(join(modules, '@electric-sql/pglite')), 'PGlite is there')

  await compile(t, join(STORE_PACKAGE, 'tsconfig.json'), join(dir, 'dist'))
  const { version } = JSON.parse(await readFile(join(STORE_PACKAGE, 'package.json'), 'utf8')) as { version: string }
  const ran = await runIn(dir, process.execPath, ['dist/bin/build-store.js', '--version'])
  t.equal(ran.code, 0, ran.stderr)
  t.equal(ran.stdout, `${version}\n`, 'its own package version')
  const help = await runIn(dir, process.execPath, ['dist/bin/build-store.js', 'create-service-account', '--help'])
  t.match(help.stdout + help.stderr, /create-service-account/, 'the admin commands load')
})
