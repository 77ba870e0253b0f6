import { receiverFor, runsAppFor, runsClient, runsSidecarFor, type RunsApp, type RunsClient } from './runs-client.ts'
import { privateRunStore } from './redis-server.ts'
import type { Harness } from './sidecar-harness.ts'
import type { WebhookReceiver } from './webhook-receiver.ts'

export type Backend = 'memory' | 'redis'

/** A runs app, a webhook receiver and a sidecar of app p/a (auth off, loopback webhooks allowed), its store in memory or a private Redis. */
export interface RunsSetup {
  readonly app: RunsApp
  readonly h: Harness
  readonly client: RunsClient
  readonly receiver: WebhookReceiver
  /** `webhookEndpoint=<the receiver's /hook>`, for a query. */
  readonly hook: string
  /** Another sidecar on the same store (when asked for). */
  readonly other?: Harness
  /** The Redis store's keys of app p/a, sorted (Redis only). */
  readonly keys?: () => Promise<string[]>
  /** The members of app p/a's due set (`…:expiry`: queued runs by their time limit, sidecars' leases), Redis only. */
  readonly due?: () => Promise<string[]>
}

/** runsSetup's pieces, closed at `t`'s teardown; `twoReplicas`: a second sidecar with the same settings and store. */
export async function runsSetup (t: { teardown: (fn: () => unknown) => void }, backend: Backend, env: Record<string, string> = {}, twoReplicas = false): Promise<RunsSetup> {
  const app = await runsAppFor(t)
  const receiver = await receiverFor(t)
  const store = backend === 'redis' ? await privateRunStore(t) : undefined
  const all = { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', PROJECT_ID: 'p', APP_NAME: 'a', ...store?.env, ...env }
  const h = await runsSidecarFor(t, app.url, all)
  const other = twoReplicas ? await runsSidecarFor(t, app.url, all) : undefined
  const keys = store === undefined ? undefined : async () => (await store.probe.keys('as:{p/a}:*')).sort()
  const due = store === undefined ? undefined : async () => await store.probe.zrange('as:{p/a}:expiry', '0', '-1')
  return {
    app, h, client: runsClient({ base: h.base }), receiver, hook: `webhookEndpoint=${encodeURIComponent(receiver.url + '/hook')}`,
    ...(other === undefined ? {} : { other }), ...(keys === undefined ? {} : { keys }), ...(due === undefined ? {} : { due })
  }
}
