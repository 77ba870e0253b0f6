import type { AddressInfo } from 'node:net'
import type { JWTVerifyGetKey } from 'jose'
import type { DestinationStream, Logger } from 'pino'
import { RevocationList } from '../auth/revocation-list.ts'
import { TokenVerifier } from '../auth/token-verifier.ts'
import type { SidecarConfig } from '../config/sidecar-config.ts'
import { AppProbe } from '../lifecycle/app-probe.ts'
import { ConcurrencyGate } from '../lifecycle/concurrency-gate.ts'
import { ConcurrencyStats } from '../lifecycle/concurrency-stats.ts'
import { InflightTracker } from '../lifecycle/inflight-tracker.ts'
import { openRuns } from '../runs/open-runs.ts'
import type { RunStore } from '../runs/store/run-store.ts'
import { type InternalErrorReporter, internalErrorReporter } from '../shared/internal-errors.ts'
import { Pool } from '../shared/undici-core.ts'
import { pathPrefix, underUrl } from '../shared/url-paths.ts'
import { openTracer } from '../tracing/open-tracer.ts'
import { traceSettingsOf } from '../tracing/trace-settings.ts'
import { AddressGuard } from '../webhook/address-guard.ts'
import { WebhookDelivery } from '../webhook/webhook-delivery.ts'
import { senderLimits, WebhookSender, type WebhookSenderLimits } from '../webhook/webhook-sender.ts'
import { createAdminServer } from './admin-server.ts'
import { AppCancel } from '../call/app-cancel.ts'
import { CallsByRunId } from '../call/calls-by-run-id.ts'
import { drainSidecar } from './drain.ts'
import { createInvokeHandler, createUpgradeHandler } from './invoke-pipeline.ts'
import { closeServer, listen } from './listeners.ts'
import { createLogger } from './logger.ts'
import { createManagementHandler } from './management-forward.ts'
import { SidecarMetrics } from '../metrics/metrics.ts'
import { createPublicServer } from './public-routes.ts'

export interface SidecarOptions {
  /** Where log lines go (default: stdout). */
  logDestination?: DestinationStream
  /** Token keys to use instead of fetching AUTH_JWKS_URL (tests). */
  tokenKeys?: JWTVerifyGetKey
  /** Probe intervals in ms (tests shorten the slow one). */
  probeIntervals?: { fast: number, slow: number }
  /** Time between refreshes of the store's revocation list (default 10 s). */
  revocationIntervalMs?: number
  /** Bounds of pending webhook deliveries (tests make them small). */
  webhookLimits?: WebhookSenderLimits
  /** Longest wait for the store's answer to a /v2 read (default 30 s; tests shorten it). */
  storeTimeoutMs?: number
  /** Time a caller has to send a request's headers (default 60 s; tests shorten it). */
  headersTimeoutMs?: number
  /** How often a warning names the app while calls wait for its first readiness (default 10 s). */
  notReadyWarningMs?: number
  /** A run store to use instead of the one RUN_STORE_URL names (tests). */
  runStore?: RunStore
}

export interface RunningSidecar {
  readonly port: number
  readonly adminPort: number
  readonly logger: Logger
  readonly metrics: SidecarMetrics
  readonly inflight: InflightTracker
  readonly webhooks: WebhookSender
  readonly runs: RunStore
  /** Logs and counts an exception nobody expected (the bin's process guard reports to it). */
  readonly reportInternal: InternalErrorReporter
  /** SIGTERM: /readyz turns 503, in-flight work gets `graceSeconds`, then everything closes. True when nothing was cut. */
  drain: (graceSeconds: number) => Promise<boolean>
  /** Closes everything at once. */
  close: () => Promise<void>
}

/** Starts the public and admin listeners of one sidecar. */
export async function startSidecar (config: SidecarConfig, options: SidecarOptions = {}): Promise<RunningSidecar> {
  const logger = createLogger(config.logLevel, options.logDestination)
  const metrics = new SidecarMetrics()
  const reportInternal = internalErrorReporter(logger, metrics.internalErrors)
  const inflight = new InflightTracker()
  const revocations = new RevocationList({
    url: underUrl(config.storeUrl, '.well-known/revoked-tokens'),
    ...(options.revocationIntervalMs === undefined ? {} : { intervalMs: options.revocationIntervalMs })
  })
  const verifier = config.disableAuth
    ? undefined
    : new TokenVerifier({ jwksUrl: config.authJwksUrl, keysElsewhere: config.authJwksUrl.origin !== config.storeUrl.origin, revoked: revocations, ...(options.tokenKeys === undefined ? {} : { keys: options.tokenKeys }) })
  const app = new Pool(config.appUrl.origin, { keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 })
  // a store that accepts a read and never answers must not hold /v2 callers for undici's default 300 s
  const storeTimeout = options.storeTimeoutMs ?? STORE_TIMEOUT_MS
  const store = new Pool(config.storeUrl.origin, { keepAliveTimeout: 30_000, headersTimeout: storeTimeout, bodyTimeout: storeTimeout })
  const intervals = { fastIntervalMs: options.probeIntervals?.fast ?? 100, slowIntervalMs: options.probeIntervals?.slow ?? 5000 }
  const readiness = new AppProbe({ appUrl: config.appUrl, path: config.readycheckPath, ...intervals })
  const health = config.healthcheckPath === config.readycheckPath
    ? readiness
    : new AppProbe({ appUrl: config.appUrl, path: config.healthcheckPath, ...intervals })
  let draining = false

  const tracer = await openTracer(traceSettingsOf(config), { logger, failures: metrics.traceExportFailures })
  const delivery = new WebhookDelivery({
    attempts: config.webhookAttempts,
    maxDelayMs: config.webhookMaxDelayMs,
    timeoutMs: config.webhookTimeoutMs,
    brand: config.webhookHeaderBrand,
    standardHeaders: config.webhookStandardHeaders,
    guard: new AddressGuard(config.webhookAllowedCidrs),
    metrics,
    logger,
    tracer
  })
  const webhooks = new WebhookSender(delivery, metrics, logger, options.webhookLimits ?? senderLimits(config.webhookMaxPending))

  const stats = new ConcurrencyStats()
  metrics.watchConcurrency(stats, config.replicaConcurrency)
  const gate = new ConcurrencyGate(config.replicaConcurrency, config.queueDepth, {
    inflight: delta => { metrics.changeInflight(delta); stats.change(delta) },
    queued: delta => { metrics.changeQueued(delta) }
  }, config.callerMaxInflight, config.appReadyTimeoutSeconds * 1000)
  metrics.watchCallers(() => gate.busiestCallerInflight)
  metrics.watchReadiness(() => readiness.passing)
  // passed() also resolves when the probe stops (shutdown): only a real pass opens the gate
  void readiness.passed().then(() => { if (readiness.passing) gate.open() })
  // calls waiting for an app that never gets ready would otherwise wait in silence
  const notReady = setInterval(() => {
    if (readiness.passing || gate.waiting === 0) return
    logger.warn({ appUrl: config.appUrl.href, waiting: gate.waiting, probe: readiness.lastFailure }, 'calls are waiting for the app to be ready')
  }, options.notReadyWarningMs ?? NOT_READY_WARNING_MS).unref()

  // every /v4 call in flight, by run id, for cancels; the app told of the ones cut (APP_CANCEL_PATH)
  const calls = new CallsByRunId()
  const appCancel = config.appCancelPath === undefined
    ? undefined
    : new AppCancel({ app, basePath: pathPrefix(config.appUrl), path: config.appCancelPath, logger, requests: metrics.appCancelRequests })
  const cancelAtApp = appCancel?.send
  const { store: runs, webhooks: deliveries, runner } = await openRuns(config, {
    gate, app, sender: webhooks, metrics, logger, reportInternal, inflight, tracer, store: options.runStore, calls, cancelAtApp
  })

  const heartbeatMs = config.sseHeartbeatSeconds * 1000
  const recorder = { logger, metrics, inflight }
  const invoke = createInvokeHandler({ ...recorder, config, verifier, app, webhooks: deliveries, gate, runs, tracer, reportInternal, calls, cancelAtApp })
  const management = createManagementHandler({ ...recorder, store, basePath: pathPrefix(config.storeUrl), storeUrl: config.storeUrl.href })
  const websockets = createUpgradeHandler({ ...recorder, config, verifier, gate })

  const server = createPublicServer({
    invoke, management, upgrade: websockets.handleUpgrade, logger, headersTimeoutMs: options.headersTimeoutMs ?? 60_000
  })
  const readinessDeps = { readiness, draining: () => draining, tokenKeysMissing: () => verifier?.keysMissing, runStoreUp: () => runs.available }
  // the console's code is loaded, and its sampler runs, only with CONSOLE_TOKEN: a plain call never meets it
  const operatorConsole = config.consoleToken === undefined ? undefined : (await import('./console/open-console.ts')).openConsole({
    ...readinessDeps,
    token: config.consoleToken,
    scope: { projectId: config.projectId as string, appName: config.appName as string }, // loadSidecarConfig requires both with it
    metrics,
    replicaConcurrency: config.replicaConcurrency,
    busiestCallers: count => gate.busiestCallers(count),
    runStoreBackend: runs.backend,
    webhooksPending: () => webhooks.pending,
    store: runs,
    calls,
    heartbeatMs,
    maxReaders: config.runMaxReaders,
    logger
  })
  const admin = createAdminServer({ ...readinessDeps, metrics, health, console: operatorConsole?.routes })

  await listen(server, config.port, config.host)
  await listen(admin, config.adminPort, config.host)
  readiness.start()
  if (health !== readiness) health.start()
  runner.start()
  if (verifier !== undefined) void revocations.start()
  verifier?.loadKeys(KEYS_RETRY_MS) // readiness waits for a key set, not for the first caller to ask for one
  const port = (server.address() as AddressInfo).port
  const adminPort = (admin.address() as AddressInfo).port
  logger.info({ port, adminPort, appUrl: config.appUrl.href, storeUrl: config.storeUrl.href, runtime: config.runtime, auth: !config.disableAuth, runStore: runs.backend, tracing: tracer === undefined ? 'off' : config.otelTracesEndpoint?.href }, 'sidecar listening')
  logger.flush() // tooling waiting for the ports (PORT=0) reads this line now, not at the next batch

  async function close (): Promise<void> {
    clearInterval(notReady)
    operatorConsole?.close()
    await runner.close()
    // the calls still open are cut; a recorded run at the app without its caller ends 503 replica
    // stopped, and its end is written before the run store closes (else it would stay running
    // until another replica took this one for lost)
    server.closeAllConnections()
    // a keyed call whose caller was just cut outlives it from its 'close' on, which comes in the
    // loop's close phase: after this turn's setImmediate, before the next one's
    await new Promise(resolve => setImmediate(() => setImmediate(resolve)))
    if (calls.stopOutliving() > 0) await settledWithin(inflight.idle(), RUN_END_WAIT_MS)
    await webhooks.drain(Promise.resolve())
    await runs.close()
    revocations.stop()
    verifier?.stop()
    stats.stop()
    readiness.stop()
    health.stop()
    websockets.closeAll()
    server.closeAllConnections()
    admin.closeAllConnections()
    await Promise.all([closeServer(server), closeServer(admin)])
    await appCancel?.settled(inflight.idle(), APP_CANCEL_WAIT_MS) // the calls just cut tell the app, before its connections go
    await Promise.all([app.destroy(), store.destroy()])
    await tracer?.close()
  }

  async function drain (graceSeconds: number): Promise<boolean> {
    draining = true
    return await drainSidecar({ logger, server, inflight, webhooks, drainRuns: async graceOver => await runner.drain(graceOver), close }, graceSeconds)
  }

  return { port, adminPort, logger, metrics, inflight, webhooks, runs, reportInternal, drain, close }
}

/** How long a close waits for the ends of the recorded runs it cut to be written. */
const RUN_END_WAIT_MS = 3000

/** `pending`, or nothing once `ms` have passed. */
async function settledWithin (pending: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([pending, new Promise(resolve => { timer = setTimeout(resolve, ms) })])
  clearTimeout(timer)
}

/** How long a close waits for the APP_CANCEL_PATH POSTs of the calls it cut. */
const APP_CANCEL_WAIT_MS = 1000

/** How often the key set is fetched again while none was ever fetched: just past the verifier's 5 s back-off after a failure. */
const KEYS_RETRY_MS = 5_500

/** How often a warning names the app while calls wait for it to be ready. */
const NOT_READY_WARNING_MS = 10_000

/** Longest wait for the build store's answer to a /v2 read (then 502). */
const STORE_TIMEOUT_MS = 30_000
