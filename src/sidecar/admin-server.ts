import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AppProbe } from '../lifecycle/app-probe.ts'
import type { SidecarMetrics } from '../metrics/metrics.ts'

/** What /readyz reads (the console's readiness tile too). */
export interface ReadinessDeps {
  readonly readiness: AppProbe
  readonly draining: () => boolean
  /** Why no token can be verified yet (auth on and no key set fetched), else undefined. */
  readonly tokenKeysMissing: () => string | undefined
  /** Whether the run store answers: /readyz's body says it (`run_store`), its status does not depend on it. */
  readonly runStoreUp?: () => boolean
}

/** Paths of their own on the admin port (the console): true when it took the request. */
export type AdminRoutes = (req: IncomingMessage, res: ServerResponse) => boolean

export interface AdminDeps extends ReadinessDeps {
  readonly metrics: SidecarMetrics
  readonly health: AppProbe
  /** The console (CONSOLE_TOKEN set), else undefined: its paths are 404. */
  readonly console?: AdminRoutes | undefined
}

/** /readyz's answer: 200 when the app is ready, the sidecar not draining and token keys held; else 503 saying which. */
export function readinessOf (deps: ReadinessDeps): { status: 200 | 503, body: { status?: 'ready', message?: string, run_store: 'up' | 'down' } } {
  const run_store = deps.runStoreUp?.() === false ? 'down' : 'up'
  const keysMissing = deps.tokenKeysMissing()
  if (deps.draining()) return { status: 503, body: { message: 'draining', run_store } }
  if (!deps.readiness.passing) return { status: 503, body: { message: 'app is not ready', run_store } }
  if (keysMissing !== undefined) return { status: 503, body: { message: `no token keys yet: ${keysMissing}`, run_store } }
  return { status: 200, body: { status: 'ready', run_store } }
}

function answer (res: ServerResponse, status: number, body: object): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/** The operators' port: `/livez`, `/healthz`, `/readyz`, `/metrics` (and the console's paths). Never exposed to callers. */
export function createAdminServer (deps: AdminDeps): Server {
  return createServer((req, res) => {
    if (deps.console?.(req, res) === true) return
    const path = (req.url ?? '/').split('?', 1)[0]
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD')
      answer(res, 405, { message: 'method not allowed' })
      return
    }
    switch (path) {
      case '/livez':
        answer(res, 200, { status: 'ok' })
        return
      case '/healthz':
        if (deps.health.passing) answer(res, 200, { status: 'ok' })
        else answer(res, 503, { message: 'app is not healthy' })
        return
      case '/readyz': {
        const { status, body } = readinessOf(deps)
        answer(res, status, body)
        return
      }
      case '/metrics':
        deps.metrics.registry.metrics().then(text => {
          res.writeHead(200, { 'content-type': deps.metrics.registry.contentType })
          res.end(text)
        }, (error: Error) => { answer(res, 500, { message: error.message }) })
        return
      default:
        answer(res, 404, { message: 'no such route' })
    }
  })
}
