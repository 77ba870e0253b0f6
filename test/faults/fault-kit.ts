import type t from 'tap'
import { scrape } from '../helpers/admin-metrics.ts'
import { send } from '../helpers/http-client.ts'
import { type Child, runNode } from '../helpers/child-process.ts'
import { eventually, type Harness } from '../helpers/sidecar-harness.ts'

// Shared by the fault-injection tests (issue 7): the app as a real child process, metrics, and
// the "stayed up and leak-free" checks every fault ends with.

export type Teardown = { teardown: (fn: () => unknown) => void }
/** A tap test (the type of `t` inside `t.test(…, async t => …)`). */
export type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

/** test/faults/fixtures/fault-app.mjs running as a child process (see that file for its routes). */
export interface FaultApp {
  readonly child: Child
  readonly port: number
  /** `http://127.0.0.1:<port>` */
  readonly url: string
  /** Resolves when the app has seen a request (or upgrade, `ws <path>`) on `seen` with X-Request-Id `id`. */
  waitForSeen: (seen: string, id: string, ms?: number) => Promise<void>
  /** Sends `signal` to the process (SIGKILL resolves once it is gone). */
  signal: (signal: NodeJS.Signals) => Promise<void>
  /** Open TCP connections to the app, not counting the one that asks. */
  connections: () => Promise<number>
  readonly running: () => boolean
}

/** Starts the fault app on `port` (0: a free one) and waits until it listens; it is killed at teardown. */
export async function startFaultApp (t: Teardown, port = 0, env: Record<string, string> = {}): Promise<FaultApp> {
  const child = runNode(['test/faults/fixtures/fault-app.mjs'], { PORT: String(port), ...env })
  const running = (): boolean => child.process.exitCode === null && child.process.signalCode === null
  t.teardown(async () => {
    if (!running()) return
    child.process.kill('SIGKILL')
    await child.exited
  })
  const listening = await child.waitForLine(line => typeof line.listening === 'number', 15_000)
  const actual = listening.listening as number
  const url = `http://127.0.0.1:${actual}`
  return {
    child,
    port: actual,
    url,
    waitForSeen: async (seen, id, ms = 5000) => { await child.waitForLine(line => line.seen === seen && line.id === id, ms) },
    signal: async signal => {
      child.process.kill(signal)
      if (signal === 'SIGKILL') await child.exited
    },
    connections: async () => ((await send(`${url}/connections`)).json() as { connections: number }).connections - 1,
    running
  }
}

/** `after - before` for every sample (of `scrape`) that changed. */
export function delta (before: Record<string, number>, after: Record<string, number>, prefix = ''): Record<string, number> {
  const out: Record<string, number> = {}
  for (const [key, value] of Object.entries(after)) {
    if (!key.startsWith(prefix) || key.includes('_bucket{') || key.endsWith('_sum') || key.includes('_sum{')) continue
    const change = value - (before[key] ?? 0)
    if (change !== 0) out[key] = change
  }
  return out
}

const GAUGES = ['sidecar_inflight_requests', 'sidecar_queued_requests', 'sidecar_sse_streams', 'sidecar_websocket_connections']

/**
 * After a fault: the sidecar still serves (/livez 200), nothing is left in flight (tracker and
 * gauges back to 0), and no webhook delivery is pending.
 */
export async function assertLeakFree (t: Tap, h: Harness, what: string): Promise<void> {
  const livez = await send(`${h.admin}/livez`)
  t.equal(livez.status, 200, `${what}: /livez still 200`)
  let last: Record<string, number> = {}
  try {
    await eventually(async () => {
      last = await scrape(h)
      return h.sidecar.inflight.count === 0 && h.sidecar.webhooks.pending === 0 && GAUGES.every(name => last[name] === 0)
    }, 5000)
  } catch {
    // fall through: the assertions below name what was left
  }
  t.equal(h.sidecar.inflight.count, 0, `${what}: nothing in flight`)
  t.equal(h.sidecar.webhooks.pending, 0, `${what}: no webhook pending`)
  for (const name of GAUGES) t.equal(last[name], 0, `${what}: ${name} 0`)
}
