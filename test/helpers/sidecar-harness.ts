import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { loadSidecarConfig, type SidecarConfig } from '../../src/config/sidecar-config.ts'
import { createTokenIssuer, serveJwks, type JwksServer, type TokenIssuer } from './demo-token-issuer.ts'
import { type RunningSidecar, type SidecarOptions, startSidecar } from '../../src/sidecar/sidecar.ts'
import { patient, sleep } from './timing.ts'

/** A log line as pino wrote it. */
export type LogLine = Record<string, unknown>

/**
 * One request a TestServer saw, recorded as soon as its headers arrived (so "the app was not
 * called" also catches a request cut half-way); `body` and `complete` are filled in at its end.
 */
export interface AppRequest {
  readonly method: string
  readonly url: string
  readonly headers: IncomingMessage['headers']
  readonly rawHeaders: string[]
  /** The whole body once `complete`; empty until then, and for good when the request was cut. */
  body: Buffer
  /** True once the request arrived in full ('end'). */
  complete: boolean
}

/** A real HTTP server on loopback port 0, for playing the app or the store in tests. */
export interface TestServer {
  readonly server: Server
  readonly port: number
  readonly url: string
  /** Every request seen, in arrival order of their headers. */
  readonly requests: AppRequest[]
  close: () => Promise<void>
}

export type TestHandler = (req: IncomingMessage, res: ServerResponse, body: Buffer) => void | Promise<void>

/** Starts a server that records each request and, once its body is read in full, hands it to `handler`. */
export async function startTestServer (handler: TestHandler): Promise<TestServer> {
  const requests: AppRequest[] = []
  const server = createServer((req, res) => {
    const seen: AppRequest = {
      method: req.method as string, url: req.url as string, headers: req.headers, rawHeaders: req.rawHeaders, body: Buffer.alloc(0), complete: false
    }
    requests.push(seen)
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('error', () => {})
    req.on('end', () => {
      seen.body = Buffer.concat(chunks)
      seen.complete = true
      void handler(req, res, seen.body)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as AddressInfo).port
  return {
    server,
    port,
    url: `http://127.0.0.1:${port}`,
    requests,
    close: async () => {
      server.closeAllConnections()
      await new Promise(resolve => server.close(resolve))
    }
  }
}

export interface Harness {
  readonly sidecar: RunningSidecar
  readonly config: SidecarConfig
  readonly issuer: TokenIssuer
  readonly jwks: JwksServer
  /** `http://127.0.0.1:<public port>` */
  readonly base: string
  /** `http://127.0.0.1:<admin port>` */
  readonly admin: string
  readonly logs: LogLine[]
  /** A valid token for `projectId` (default `proj`). */
  token: (projectId?: string) => Promise<string>
  close: () => Promise<void>
}

/**
 * A sidecar in this process, in front of `appUrl`, with its own key pair and JWKS server,
 * its log lines captured in `logs`. `env` overrides any sidecar variable; `options` is passed on
 * to startSidecar (for example `webhookLimits`).
 */
export async function startHarness (appUrl: string, env: Record<string, string> = {}, options: Omit<SidecarOptions, 'logDestination'> = {}): Promise<Harness> {
  const issuer = await createTokenIssuer()
  const jwks = await serveJwks([issuer])
  const config = loadSidecarConfig({
    PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', APP_URL: appUrl, AUTH_JWKS_URL: jwks.url.href, STORE_URL: jwks.url.origin, LOG_LEVEL: 'info', ...env
  })
  const logs: LogLine[] = []
  const sidecar = await startSidecar(config, {
    logDestination: { write: (line: string) => { logs.push(JSON.parse(line) as LogLine) } },
    probeIntervals: { fast: 20, slow: 200 },
    revocationIntervalMs: 100,
    ...options
  })
  return {
    sidecar,
    config,
    issuer,
    jwks,
    base: `http://127.0.0.1:${sidecar.port}`,
    admin: `http://127.0.0.1:${sidecar.adminPort}`,
    logs,
    token: async (projectId = 'proj') => await issuer.sign(projectId),
    close: async () => {
      await sidecar.close()
      await jwks.close()
    }
  }
}

/** startHarness, closed when the test `t` ends. */
export async function sidecarFor (t: { teardown: (fn: () => unknown) => void }, appUrl: string, env: Record<string, string> = {},
  options: Omit<SidecarOptions, 'logDestination'> = {}): Promise<Harness> {
  const h = await startHarness(appUrl, env, options)
  t.teardown(() => h.close())
  return h
}

/** Waits until `check` is true, polling every 10 ms, failing after `ms` (times PATIENCE). */
export async function eventually (check: () => boolean | Promise<boolean>, ms = 5000): Promise<void> {
  const until = Date.now() + patient(ms)
  while (!(await check())) {
    if (Date.now() > until) throw new Error('condition not met in time')
    await sleep(10)
  }
}

/** A loopback port nothing listens on (for an app that is not there yet, or any more). */
export { freePort } from './ports.ts'
