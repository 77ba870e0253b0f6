import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import t from 'tap'
import { LISTEN_BACKLOG } from '../../src/sidecar/listeners.ts'
import { startHarness, startTestServer } from '../helpers/sidecar-harness.ts'

/** The accept-queue size of the TCP listener on `port` (`ss` shows it as Send-Q), or undefined without `ss`. */
function listenBacklog (port: number): number | undefined {
  try {
    const out = execFileSync('ss', ['-ltnH', `sport = :${port}`], { encoding: 'utf8' })
    const fields = out.trim().split(/\s+/)
    return fields[0] === 'LISTEN' ? Number(fields[2]) : undefined
  } catch {
    return undefined
  }
}

function hasSs (): boolean {
  try {
    execFileSync('ss', ['-V'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

const skip = process.platform !== 'linux' || !hasSs() ? 'needs Linux and `ss`' : false

t.test('both listeners ask the kernel for a 4096-connection accept queue (Node defaults to 511)', { skip }, async t => {
  const app = await startTestServer((req, res) => { res.end() })
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await app.close() })
  const expected = Math.min(LISTEN_BACKLOG, Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8')))
  t.equal(LISTEN_BACKLOG, 4096)
  t.equal(listenBacklog(Number(new URL(h.base).port)), expected, 'public listener')
  t.equal(listenBacklog(Number(new URL(h.admin).port)), expected, 'admin listener')
})
