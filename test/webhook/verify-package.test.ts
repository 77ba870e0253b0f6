// The receivers' package (packages/app-sidecar-verify): packed, installed on its own with no
// network into an empty project, it verifies a delivery the sidecar really sent, and so does the
// Python verifier of docs/routes.md. Receivers must not pay for the server's dependencies.
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { signWebhook } from '../../src/webhook/webhook-signature.ts'
import type { ReceivedAttempt } from '../helpers/webhook-receiver.ts'
import { startWebhookReceiver } from '../helpers/webhook-receiver.ts'
import { runIn, sizeOf } from '../helpers/npm-project.ts'
import { call, LOOPBACK_ENV, sidecarFor, startWebhookApp } from './webhook-kit.ts'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const PACKAGE_DIR = join(ROOT, 'packages/app-sidecar-verify')
const NAME = 'app-sidecar-verify'
const SECRET = 'whsec_receiver-package'
const RUN_ID = 'verify-package-1'
const SIGNATURE_HEADER = 'x-service-webhook-signature'
/** Everything the tarball holds: the compiled signing file, the run-id rule it imports, and no more. */
const PACKED_FILES = [
  'README.md', 'dist/shared/run-id-rule.d.ts', 'dist/shared/run-id-rule.js', 'dist/webhook/webhook-signature.d.ts',
  'dist/webhook/webhook-signature.js', 'package.json'
]
/** The whole node_modules of a receiver that installed it (8.4 kB when this was written, against 12 MB for the sidecar's production install). */
const MAX_INSTALLED_BYTES = 20_000

async function filesUnder (dir: string): Promise<string[]> {
  const found: string[] = []
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) found.push(relative(dir, join(entry.parentPath, entry.name)))
  }
  return found.sort()
}

let work: string
let delivery: ReceivedAttempt
/** What a child gets to check: the delivery as the receiver saw it. */
let deliveryJson: string

t.before(async () => {
  work = await mkdtemp(join(tmpdir(), 'verify-package-'))
  const app = await startWebhookApp()
  const receiver = await startWebhookReceiver([], 204)
  t.teardown(async () => {
    await receiver.close()
    await app.close()
    await rm(work, { recursive: true, force: true })
  })
  const h = await sidecarFor(t, app.url, LOOPBACK_ENV)
  const response = await call(h, '/unicode', `${receiver.url}/hook`, { headers: { 'x-request-id': RUN_ID, 'x-webhook-secret': SECRET } })
  if (response.status !== 200) throw new Error(`the call answered ${response.status}`)
  delivery = (await receiver.waitForAttempts(1, 10_000))[0] as ReceivedAttempt
  deliveryJson = JSON.stringify({ secret: SECRET, headers: delivery.headers, body: delivery.body.toString('base64') })
})

let tarball: string

t.test('npm pack: zero dependencies, the signing code and nothing else, a few kilobytes', async t => {
  t.equal(delivery.headers[SIGNATURE_HEADER], signWebhook(SECRET, RUN_ID, delivery.headers['x-service-webhook-timestamp'] as string, delivery.body),
    'the delivery carries the sidecar\'s signature')
  const manifest = JSON.parse(await readFile(join(PACKAGE_DIR, 'package.json'), 'utf8')) as Record<string, unknown>
  const root = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string }
  t.equal(manifest.name, NAME)
  t.equal(manifest.version, root.version, 'released with the sidecar\'s version')
  for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies', 'bundleDependencies']) {
    t.equal(manifest[field], undefined, `no ${field}`)
  }

  // exactly as its README says, from the clone's root
  const readme = await readFile(join(PACKAGE_DIR, 'README.md'), 'utf8')
  t.ok(readme.includes('npm pack ./packages/app-sidecar-verify '), 'the README gives this command')
  const packed = await runIn(ROOT, 'npm', ['pack', './packages/app-sidecar-verify', '--json', '--pack-destination', work])
  t.equal(packed.code, 0, `npm pack succeeds${packed.code === 0 ? '' : `: ${packed.stderr}`}`)
  const [info] = JSON.parse(packed.stdout) as Array<{ filename: string, size: number, unpackedSize: number, files: Array<{ path: string }> }>
  if (info === undefined) throw new Error(`npm pack printed no package: ${packed.stdout}`)
  t.same(info.files.map(f => f.path).sort(), PACKED_FILES, 'exactly the compiled signing code, its types, README and package.json')
  t.ok(info.unpackedSize < MAX_INSTALLED_BYTES, `unpacked ${info.unpackedSize} bytes (tarball ${info.size})`)
  tarball = join(work, info.filename)
})

t.test('it installs alone, offline, and verifies the sidecar\'s delivery in plain JavaScript and in TypeScript without @types/node', async t => {
  const project = join(work, 'receiver')
  await mkdir(project)
  await writeFile(join(project, 'package.json'), JSON.stringify({ name: 'receiver', private: true, type: 'module' }))
  // an empty cache as well: nothing can come from anywhere but the tarball
  const installed = await runIn(project, 'npm', ['install', '--offline', '--no-audit', '--no-fund', '--cache', join(work, 'npm-cache'), tarball])
  t.equal(installed.code, 0, `npm install --offline succeeds${installed.code === 0 ? '' : `: ${installed.stderr}`}`)
  const modules = join(project, 'node_modules')
  t.same((await readdir(modules)).sort(), ['.package-lock.json', NAME], 'node_modules holds this package and nothing else')
  t.same(await filesUnder(join(modules, NAME)), PACKED_FILES, 'as packed')
  const bytes = await sizeOf(modules)
  t.ok(bytes < MAX_INSTALLED_BYTES, `node_modules is ${bytes} bytes`)

  await writeFile(join(project, 'receiver.mjs'), `
import { signatureHeaderNames, signWebhook, verifyWebhook } from '${NAME}'
let input = ''
for await (const chunk of process.stdin) input += chunk
const { secret, headers, body: base64 } = JSON.parse(input)
const body = Buffer.from(base64, 'base64')
const names = signatureHeaderNames('Service')
console.log(JSON.stringify({
  genuine: verifyWebhook(secret, headers, body),
  asText: verifyWebhook(secret, headers, body.toString('utf8')),
  tampered: verifyWebhook(secret, headers, Buffer.concat([body, Buffer.from(' ')])),
  wrongSecret: verifyWebhook(secret + 'x', headers, body),
  otherBrand: verifyWebhook(secret, headers, body, { brand: 'Acme' }),
  expired: verifyWebhook(secret, { ...headers, [names.timestamp]: '1700000000', [names.signature]: signWebhook(secret, headers['x-request-id'], 1700000000, body) }, body),
  resigned: signWebhook(secret, headers['x-request-id'], headers[names.timestamp], body) === headers[names.signature]
}))
`)
  const verified = await runIn(project, process.execPath, ['receiver.mjs'], deliveryJson)
  t.equal(verified.code, 0, verified.stderr)
  t.same(JSON.parse(verified.stdout), {
    genuine: true, asText: true, tampered: false, wrongSecret: false, otherBrand: false, expired: false, resigned: true
  }, 'the installed package accepts the real delivery and refuses every altered one')

  await writeFile(join(project, 'receiver.ts'), `
import { verifyWebhook, type VerifyWebhookOptions } from '${NAME}'
const options: VerifyWebhookOptions = { brand: 'Service', toleranceSeconds: 300 }
export const genuine: boolean = verifyWebhook('secret', { 'x-request-id': 'r' }, new Uint8Array(0), options)
`)
  await writeFile(join(project, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { strict: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', noEmit: true, types: [], skipLibCheck: false },
    files: ['receiver.ts']
  }))
  const compiled = await runIn(project, join(ROOT, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'])
  t.equal(compiled.code, 0, `its types compile with no @types/node${compiled.code === 0 ? '' : `: ${compiled.stdout}${compiled.stderr}`}`)
})

t.test('the Python verifier of docs/routes.md accepts the same delivery and refuses altered ones', async t => {
  const routes = await readFile(join(ROOT, 'docs/routes.md'), 'utf8')
  const section = routes.slice(routes.indexOf('#### Receiving and verifying a webhook'))
  const block = /```python\n([\s\S]*?)```/.exec(section)?.[1]
  if (block === undefined) throw new Error('no python block under "Receiving and verifying a webhook"')
  const driver = `
import base64, json, sys
data = json.load(sys.stdin)
secret, headers, body = data["secret"], data["headers"], base64.b64decode(data["body"])
sig = "x-service-webhook-signature"
print(json.dumps({
    "genuine": verify_webhook(secret, headers, body),
    "tampered": verify_webhook(secret, headers, body + b" "),
    "wrongSecret": verify_webhook(secret + "x", headers, body),
    "otherBrand": verify_webhook(secret, headers, body, brand="Acme"),
    "nonAscii": verify_webhook(secret, {**headers, sig: "v1," + "\\u00e9" * 64}, body),
    "badRunId": verify_webhook(secret, {**headers, "x-request-id": "a.b"}, body),
    "noHeaders": verify_webhook(secret, {}, body),
}))
`
  const ran = await runIn(ROOT, 'python3', ['-c', `${block}\n${driver}`], deliveryJson)
  t.equal(ran.code, 0, ran.stderr)
  t.same(JSON.parse(ran.stdout), {
    genuine: true, tampered: false, wrongSecret: false, otherBrand: false, nonAscii: false, badRunId: false, noHeaders: false
  }, 'true for the real delivery only, and never an exception')
})
