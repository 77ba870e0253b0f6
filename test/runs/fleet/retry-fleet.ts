import { type Child, runNode } from '../../helpers/child-process.ts'
import { fetchMetrics, sampleValue } from '../../helpers/admin-metrics.ts'
import type { SentResponse } from '../../helpers/http-client.ts'
import { startPrivateRedis } from '../../helpers/redis-server.ts'
import { type RunRecordBody, runsClient } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import { type SidecarProcess, startSidecarProcess } from '../../helpers/sidecar-process.ts'
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.ts'
import type { OpenStream, ParsedEvent } from '../../stream/sse-test-kit.ts'

// What the retry tests share (docs/runs.md, "Running on interruptible capacity"): a private
// Redis, replicas that are real processes (a sidecar of app `p/a` in front of its own app,
// fixtures/attempts-app.mjs), a webhook receiver, and reads of what each saw.

type Teardown = { teardown: (fn: () => unknown) => void }

/** fixtures/attempts-app.mjs as a child process. */
export interface AttemptsApp {
  readonly child: Child
  readonly url: string
  /** What it saw of run `id`: the path and X-Run-Attempt of each request, in order. */
  readonly seen: (id: string) => Array<{ path: string, attempt: string | null }>
  /** Resolves once it has seen attempt `attempt` of run `id`. */
  readonly waitForAttempt: (id: string, attempt: string | null, ms?: number) => Promise<void>
  readonly kill: () => Promise<void>
}

export async function startAttemptsApp (t: Teardown): Promise<AttemptsApp> {
  const child = runNode(['test/runs/fleet/fixtures/attempts-app.mjs'], { PORT: '0' })
  const running = (): boolean => child.process.exitCode === null && child.process.signalCode === null
  const kill = async (): Promise<void> => {
    if (!running()) return
    child.process.kill('SIGKILL')
    await child.exited
  }
  t.teardown(kill)
  const listening = await child.waitForLine(line => typeof line.listening === 'number', 15_000)
  return {
    child,
    url: `http://127.0.0.1:${listening.listening as number}`,
    seen: id => child.lines.filter(line => line.id === id).map(line => ({ path: line.seen as string, attempt: line.attempt as string | null })),
    waitForAttempt: async (id, attempt, ms = 10_000) => { await child.waitForLine(line => line.id === id && line.attempt === attempt, ms) },
    kill
  }
}

/** A replica: its sidecar process and its app. */
export interface Replica {
  readonly sidecar: SidecarProcess
  readonly app: AttemptsApp
}

export interface RetryFleet {
  readonly receiver: WebhookReceiver
  /** `webhookEndpoint=…` for a submission's query. */
  readonly hook: string
  /** A replica started now: its app, then its sidecar (RUN_MAX_ATTEMPTS=3, one slot; `env` on top). */
  readonly replica: (env?: Record<string, string>) => Promise<Replica>
}

export async function retryFleet (t: Teardown): Promise<RetryFleet> {
  const redis = await startPrivateRedis(t)
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const common = {
    DISABLE_AUTH: 'true', PROJECT_ID: 'p', APP_NAME: 'a', RUN_STORE_URL: redis.url, REPLICA_CONCURRENCY: '1',
    WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', RUN_MAX_ATTEMPTS: '3'
  }
  return {
    receiver,
    hook: `webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}`,
    replica: async (env = {}) => {
      const app = await startAttemptsApp(t)
      const sidecar = await startSidecarProcess(t, { ...common, APP_URL: app.url, ...env })
      return { sidecar, app }
    }
  }
}

/** An async submission of `path` (POST) with run id `runId` to `sidecar`; `headers` on top. */
export async function submitRun (sidecar: SidecarProcess, path: string, runId: string, headers: Record<string, string> = {}): Promise<SentResponse> {
  return await runsClient({ base: sidecar.base }).submit(path, runId, { headers })
}

/** The run's record as `sidecar` reads it. */
export async function recordOn (sidecar: SidecarProcess, runId: string): Promise<RunRecordBody> {
  return (await runsClient({ base: sidecar.base }).read(runId)).record
}

/** Follows the run's events on `sidecar` until its `done` event, and returns them all (without the keep-alive comments). */
export async function followToEnd (stream: OpenStream, ms = 15_000): Promise<ParsedEvent[]> {
  await eventually(() => stream.events.some(event => event.event === 'done'), ms)
  return stream.events
}

/** The webhook deliveries the receiver got for run `runId`. */
export function webhooksOf (receiver: WebhookReceiver, runId: string): Array<Record<string, unknown>> {
  return receiver.attempts.filter(attempt => attempt.headers['x-request-id'] === runId).map(attempt => JSON.parse(attempt.body.toString()) as Record<string, unknown>)
}

/** sidecar_run_retries_total{reason} on `sidecar`. */
export async function retriesOn (sidecar: SidecarProcess, reason: string): Promise<number | undefined> {
  return sampleValue(await fetchMetrics(sidecar.admin), 'sidecar_run_retries_total', { reason })
}

/** Waits until the run's webhook is recorded delivered (its one delivery made and written back). */
export async function webhookDelivered (sidecar: SidecarProcess, runId: string, ms = 15_000): Promise<void> {
  await eventually(async () => (await recordOn(sidecar, runId)).webhook?.status === 'delivered', ms)
}
