import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AppProbe } from '../lifecycle/app-probe.ts'
import type { SidecarMetrics } from '../metrics/metrics.ts'

export interface AdminDeps {
  readonly metrics: SidecarMetrics
  readonly readiness: AppProbe
  readonly health: AppProbe
  readonly draining: () => boolean
  /** Why no token can be verified yet (auth on and no key set fetched), else undefined. */
  readonly tokenKeysMissing: () => string | undefined
  /** Whether the run store answers: /readyz's body says it (`run_store`), its status does not depend on it. */
  readonly runStoreUp?: () => boolean
}

function answer (res: ServerResponse, status: number, body: object): void {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) })
  res.end(text)
}

/** The operators' port: `/livez`, `/healthz`, `/readyz` and `/metrics`. Never exposed to callers. */
export function createAdminServer (deps: AdminDeps): Server {
  return createServer((req, res) => {
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
        const runStore = { run_store: deps.runStoreUp?.() === false ? 'down' : 'up' }
        if (deps.draining()) answer(res, 503, { message: 'draining', ...runStore })
        else if (!deps.readiness.passing) answer(res, 503, { message: 'app is not ready', ...runStore })
        else if (deps.tokenKeysMissing() !== undefined) answer(res, 503, { message: `no token keys yet: ${deps.tokenKeysMissing() as string}`, ...runStore })
        else answer(res, 200, { status: 'ready', ...runStore })
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
