import type { Test } from 'tap'
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
  /** The sha256 (hex) of the body of each request of run `id` it saw, in order (null: none). */
  readonly bodies: (id: string) => Array<string | null>
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
    bodies: id => child.lines.filter(line => line.id === id).map(line => line.body as string | null),
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

/** The fleet of a retry test once attempt 1 of its run runs on replica `a`, `b` idle beside it and a reader following the run on `b`. */
export interface FirstAttempt {
  readonly fleet: RetryFleet
  readonly a: Replica
  readonly b: Replica
  readonly reader: OpenStream
}

/**
 * Replica `a` runs attempt 1 of run `id` (POST `path`, a webhook asked for; `aEnv` on top of its
 * settings); then `b` starts (so the run cannot start there first) and a reader follows the run on
 * `b`, once it has read `firstEvents` events.
 */
export async function firstAttemptOnA (t: Test, id: string, path: string, options: { aEnv?: Record<string, string>, firstEvents?: number } = {}): Promise<FirstAttempt> {
  const fleet = await retryFleet(t)
  const a = await fleet.replica(options.aEnv)
  t.equal((await submitRun(a.sidecar, `${path}&${fleet.hook}`, id)).status, 202)
  await a.app.waitForAttempt(id, '1')
  const b = await fleet.replica()
  const reader = await runsClient({ base: b.sidecar.base }).follow(id)
  if (options.firstEvents !== undefined) await reader.waitForEvents(options.firstEvents)
  return { fleet, a, b, reader }
}

/** The events a reader of a run retried once for `reason` sees before `done`: attempt 1's event (when it had one), the retry event, attempt 2's three. */
export function retriedEvents (reason: string, firstHadEvent: boolean): Array<{ id: string, event: string | undefined, data: string }> {
  const first = firstHadEvent ? ['{"attempt":1,"step":0}'] : []
  const datas: Array<[string | undefined, string]> = [
    ...first.map((data): [undefined, string] => [undefined, data]),
    ['retry', JSON.stringify({ attempt: 2, reason })],
    ...[0, 1, 2].map((step): [undefined, string] => [undefined, JSON.stringify({ attempt: 2, step })])
  ]
  return datas.map(([event, data], n) => ({ id: String(n), event, data }))
}

/** A run retried once for `reason` and succeeded at attempt 2: its record (read on `sidecar` once its one webhook is delivered) and that webhook. */
export async function checkRetriedOnce (t: Test, fleet: RetryFleet, sidecar: SidecarProcess, id: string, reason: string): Promise<RunRecordBody> {
  await webhookDelivered(sidecar, id)
  const record = await recordOn(sidecar, id)
  t.match(record, {
    status: 'succeeded', status_code: 200, attempt: 2, result: [{ attempt: 2, step: 0 }, { attempt: 2, step: 1 }, { attempt: 2, step: 2 }],
    interruptions: [{ attempt: 1, reason, at: /^\d{4}-\d\d-\d\dT/ }], webhook: { status: 'delivered', attempts: 1 }
  }, 'its record: attempt 2 succeeded, attempt 1 interrupted')
  t.equal(record.interruptions?.length, 1)
  const hooks = webhooksOf(fleet.receiver, id)
  t.equal(hooks.length, 1, 'one webhook, at the final outcome')
  t.match(hooks[0], { run_id: id, status_code: 200, result: [{ attempt: 2, step: 0 }, { attempt: 2, step: 1 }, { attempt: 2, step: 2 }] })
  return record
}
