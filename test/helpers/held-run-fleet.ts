import type { ServerResponse } from 'node:http'
import { startPrivateRedis } from './redis-server.ts'
import { startTestServer, type TestServer } from './sidecar-harness.ts'
import { startSidecarProcess, type SidecarProcess } from './sidecar-process.ts'
import { startWebhookReceiver, type WebhookReceiver } from './webhook-receiver.ts'

/** Two sidecar processes of app `p/a`, one slot each, on a private Redis, each before its own app; a webhook receiver. */
export interface HeldRunFleet {
  readonly receiver: WebhookReceiver
  readonly apps: readonly [TestServer, TestServer]
  readonly sidecars: readonly [SidecarProcess, SidecarProcess]
  /** The response of the request to `path` each app holds (undefined until one came). */
  readonly held: Array<ServerResponse | undefined>
}

/**
 * The fleet the replica-lost tests share: a request to `path` is held by its app (after `begin`,
 * e.g. the first chunk of a stream); any other gets `{"ok":true}`. `env` on top of the sidecars'.
 */
export async function heldRunFleet (t: { teardown: (fn: () => unknown) => void }, path: string,
  begin: (res: ServerResponse) => void = () => {}, env: Record<string, string> = {}): Promise<HeldRunFleet> {
  const redis = await startPrivateRedis(t)
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const held: Array<ServerResponse | undefined> = [undefined, undefined]
  const apps = await Promise.all([0, 1].map(async i => {
    const app = await startTestServer((req, res) => {
      if (req.url?.startsWith(path) === true) {
        held[i] = res
        begin(res)
      } else res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
    })
    t.teardown(() => app.close())
    return app
  })) as [TestServer, TestServer]
  const common = { DISABLE_AUTH: 'true', PROJECT_ID: 'p', APP_NAME: 'a', RUN_STORE_URL: redis.url, REPLICA_CONCURRENCY: '1', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', ...env }
  // started together: each start is mostly waiting (Redis, its first /readyz)
  const sidecars = await Promise.all([
    startSidecarProcess(t, { ...common, APP_URL: apps[0].url }),
    startSidecarProcess(t, { ...common, APP_URL: apps[1].url })
  ] as const)
  return { receiver, apps, sidecars, held }
}
