import { type Child, runBin } from './child-process.ts'
import { send } from './http-client.ts'
import { eventually } from './sidecar-harness.ts'

/** The sidecar bin running in a child process, with the ports from its start-up line. */
export interface SidecarProcess {
  readonly child: Child
  readonly port: number
  readonly adminPort: number
  /** `http://127.0.0.1:<port>` */
  readonly base: string
  /** `http://127.0.0.1:<admin port>` */
  readonly admin: string
  /** `ws://127.0.0.1:<port>` */
  readonly ws: string
  /** True until the process has exited. */
  running: () => boolean
}

/**
 * Runs the sidecar bin (`dist/bin/app-sidecar.js`) with both listeners on loopback port 0 (`env` on top), waits for
 * its "sidecar listening" line and then, unless `ready` is false, for /readyz 200. It is killed
 * (SIGKILL) at `t`'s teardown if still running.
 */
export async function startSidecarProcess (t: { teardown: (fn: () => unknown) => void }, env: Record<string, string>,
  options: { ready?: boolean } = {}): Promise<SidecarProcess> {
  const child = runBin('app-sidecar', { PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', ...env })
  const running = (): boolean => child.process.exitCode === null && child.process.signalCode === null
  t.teardown(async () => {
    if (!running()) return
    child.process.kill('SIGKILL')
    await child.exited
  })
  const started = await child.waitForLine(line => line.msg === 'sidecar listening', 15_000)
  const port = started.port as number
  const adminPort = started.adminPort as number
  const admin = `http://127.0.0.1:${adminPort}`
  if (options.ready !== false) await eventually(async () => (await send(`${admin}/readyz`)).status === 200)
  return { child, port, adminPort, base: `http://127.0.0.1:${port}`, admin, ws: `ws://127.0.0.1:${port}`, running }
}
