import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { built, runNode } from '../helpers/child-process.ts'
import { startTestServer } from '../helpers/sidecar-harness.ts'

// `npm start` as a newcomer meets it: free ports with PORT=0, one clear line when a port is
// taken, and no temporary store left behind on any exit path.

/** A TMPDIR of the test's own, so what the demo leaves in it can be counted. */
function ownTmpdir (t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'demo-test-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  return dir
}

/** The demo's temporary stores in `dir`. */
const demoFolders = (dir: string): string[] => readdirSync(dir).filter(name => name.startsWith('app-sidecar-demo-'))

t.test('PORT=0 picks free ports for both listeners; SIGTERM stops it and removes its store', async t => {
  const tmp = ownTmpdir(t)
  const demo = runNode([built('src/demo/start.ts')], { PORT: '0', TMPDIR: tmp })
  t.teardown(() => { demo.process.kill('SIGKILL') })
  const line = await demo.waitForLine(line => line.msg === 'sidecar listening', 30_000)
  t.not(line.port, 8000)
  t.not(line.adminPort, 9090, 'the admin port is a free one too')
  t.equal(demoFolders(tmp).length, 1, 'its store lives in TMPDIR meanwhile')
  demo.process.kill('SIGTERM')
  t.equal(await demo.exited, 0)
  t.same(demoFolders(tmp), [], 'the temporary store is gone')
})

t.test('a port in use: one line naming it, exit 1, and no temporary store left behind', async t => {
  const tmp = ownTmpdir(t)
  const busy = await startTestServer((req, res) => { res.end() })
  t.teardown(() => busy.close())
  const demo = runNode([built('src/demo/start.ts')], { PORT: String(busy.port), ADMIN_PORT: '0', TMPDIR: tmp })
  t.teardown(() => { demo.process.kill('SIGKILL') })
  t.equal(await demo.exited, 1)
  t.same(demo.stderr.trim().split('\n'), [
    `npm start: cannot start the sidecar: EADDRINUSE (port ${busy.port} is taken: set PORT and ADMIN_PORT, or PORT=0 for free ones)`
  ])
  t.same(demoFolders(tmp), [], 'the temporary store is gone')
})
