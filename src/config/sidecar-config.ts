import { ConfigError } from '../errors.ts'
import { type EnvVariable, envHelpRows, envVariable, loadEnvTable } from './env-table.ts'
import { underUrl } from '../shared/url-paths.ts'
import {
  type AllowedOrigins, type Cidr, type EnvParser, integerIn, numberUpTo, oneOf, parseBoolean, parseCidrList,
  parseBearerToken, parseHeaderBrand, parseHttpPath, parseHttpUrl, parseId, parseOriginList, parsePort, LOG_LEVELS, type LogLevel
} from './env-parsers.ts'
import { parseRunStoreAddress, type RunStoreAddress } from './run-store-address.ts'

export type Runtime = 'cortex' | 'custom'
/** RUN_ACCESS: who may read, list and cancel a recorded run: any token of its project, or only the `sub` that submitted it. */
export const RUN_ACCESS_MODES = ['project', 'caller'] as const
export type RunAccess = typeof RUN_ACCESS_MODES[number]

/** OTEL_TRACES_SAMPLER's values (the OpenTelemetry SDK environment specification's built-in samplers). */
export const TRACE_SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const
export type TraceSampler = typeof TRACE_SAMPLERS[number]
/** OTLP's protocols over HTTP (gRPC is not offered). */
export const OTLP_PROTOCOLS = ['http/protobuf', 'http/json'] as const
export type OtlpProtocol = typeof OTLP_PROTOCOLS[number]

/** The sidecar's whole configuration, validated. */
export interface SidecarConfig {
  port: number
  adminPort: number
  host: string
  appUrl: URL
  storeUrl: URL
  projectId: string | undefined
  appName: string | undefined
  runtime: Runtime
  disableAuth: boolean
  authJwksUrl: URL
  replicaConcurrency: number
  queueDepth: number
  /** CALLER_MAX_INFLIGHT: most calls one caller has at this replica's app at once (0: no limit); the rest wait. */
  callerMaxInflight: number
  maxBodyBytes: number
  envelopeMaxBodyBytes: number
  deadlineSeconds: number
  /** Longest a call waits for the app's first readiness (0: no bound); past it 503 app not ready. */
  appReadyTimeoutSeconds: number
  responseGracePeriodSeconds: number
  readycheckPath: string | undefined
  healthcheckPath: string | undefined
  /** APP_CANCEL_PATH: the app path POSTed when the sidecar aborts a call's app request, `{run_id}` standing for the run id; undefined: none. */
  appCancelPath: string | undefined
  allowQueryToken: boolean
  sseHeartbeatSeconds: number
  webhookAttempts: number
  webhookMaxDelayMs: number
  webhookTimeoutMs: number
  webhookMaxBodyBytes: number
  webhookHeaderBrand: string
  webhookAllowedCidrs: Cidr[]
  webhookStandardHeaders: boolean
  webhookMaxPending: number
  runStoreUrl: RunStoreAddress | undefined
  /** HOSTNAME: this replica's name in a shared run store (its connections' names, its consumer name); undefined: a random id. */
  replicaName: string | undefined
  /** RUN_LOST_AFTER_SECONDS: a sidecar silent this long is taken for dead by the others sharing its run store. */
  runLostAfterSeconds: number
  runRetentionSeconds: number
  runMaxEvents: number
  runMaxEventBytes: number
  asyncQueueDepth: number
  streamMaxEventBytes: number
  runMaxReaders: number
  asyncQueueMaxBytes: number
  /** ASYNC_QUEUE_TTL_SECONDS: an async run still queued this long after its submission fails (504). */
  asyncQueueTtlSeconds: number
  /** RUN_MAX_ATTEMPTS: attempts an async run may have when its replica is interrupted (1: none again). */
  runMaxAttempts: number
  /** RUN_ACCESS: `caller`: a recorded run is read, listed and canceled by the `sub` that submitted it alone (others get 404). */
  runAccess: RunAccess
  /** CORS_ALLOWED_ORIGINS: whose browser pages may call /v4; undefined: no CORS header anywhere. */
  corsAllowedOrigins: AllowedOrigins | undefined
  /** CONSOLE_TOKEN: turns on the operator console on the admin port; undefined: no console (404). */
  consoleToken: string | undefined
  logLevel: LogLevel
  otelSdkDisabled: boolean
  otelEndpoint: URL | undefined
  /** Where spans go (OTLP/HTTP); undefined: tracing off, no SDK loaded. */
  otelTracesEndpoint: URL | undefined
  otelProtocol: OtlpProtocol
  otelTracesProtocol: OtlpProtocol
  otelServiceName: string
  otelTracesSampler: TraceSampler
  otelTracesSamplerArg: number
  otelScheduleDelayMs: number
  buildId: string | undefined
  appId: string | undefined
  storeToken: string | undefined
}

const MAX_SECONDS = 31_536_000 // one year
const GIB = 1024 ** 3

const variable = envVariable<SidecarConfig>()
const fixed = <T>(value: T) => () => value
const optionalString = (parse: EnvParser<string>): EnvParser<string | undefined> => parse

/** Every sidecar variable, in parse order: a default may depend on the values above it. */
export const SIDECAR_VARIABLES = [
  variable({ name: 'PORT', key: 'port', defaultText: '8000', meaning: 'public listener; 0 picks a free port', parse: parsePort, fallback: fixed(8000) }),
  variable({ name: 'ADMIN_PORT', key: 'adminPort', defaultText: '9090', meaning: '/livez /healthz /readyz /metrics listener', parse: parsePort, fallback: fixed(9090) }),
  variable({ name: 'HOST', key: 'host', defaultText: '0.0.0.0', meaning: 'bind address for both listeners', parse: (_n, raw) => raw.trim(), fallback: fixed('0.0.0.0') }),
  variable({ name: 'APP_URL', key: 'appUrl', defaultText: 'http://127.0.0.1:8192', meaning: 'the app container', parse: parseHttpUrl, fallback: () => new URL('http://127.0.0.1:8192') }),
  variable({ name: 'STORE_URL', key: 'storeUrl', defaultText: 'http://127.0.0.1:7070', meaning: 'the central build store (/v2 reads, token keys)', parse: parseHttpUrl, fallback: () => new URL('http://127.0.0.1:7070') }),
  variable({ name: 'PROJECT_ID', key: 'projectId', defaultText: undefined, meaning: 'when set, /v4 calls for other projects get 404', parse: optionalString(parseId), fallback: fixed(undefined) }),
  variable({ name: 'APP_NAME', key: 'appName', defaultText: undefined, meaning: 'when set, /v4 calls for other apps get 404', parse: optionalString(parseId), fallback: fixed(undefined) }),
  variable({ name: 'RUNTIME', key: 'runtime', defaultText: 'cortex', meaning: 'cortex (wrap 2xx bodies) or custom (pass through)', parse: oneOf(['cortex', 'custom'] as const), fallback: fixed<Runtime>('cortex') }),
  variable({ name: 'DISABLE_AUTH', key: 'disableAuth', defaultText: 'false', meaning: 'no token needed on /v4', parse: parseBoolean, fallback: fixed(false) }),
  variable({ name: 'AUTH_JWKS_URL', key: 'authJwksUrl', defaultText: '$STORE_URL/.well-known/jwks.json', meaning: 'token-verification keys', parse: parseHttpUrl, fallback: p => underUrl(p.storeUrl ?? DEFAULT_STORE_URL, '.well-known/jwks.json') }),
  variable({ name: 'REPLICA_CONCURRENCY', key: 'replicaConcurrency', defaultText: '0', meaning: 'most requests in flight to the app; 0 = no limit', parse: integerIn(0, 1_000_000), fallback: fixed(0) }),
  variable({ name: 'QUEUE_DEPTH', key: 'queueDepth', defaultText: '10 x concurrency, or 1000', meaning: 'requests allowed to wait; beyond it 503', parse: integerIn(0, 10_000_000), fallback: p => p.replicaConcurrency !== undefined && p.replicaConcurrency > 0 ? 10 * p.replicaConcurrency : 1000 }),
  variable({ name: 'CALLER_MAX_INFLIGHT', key: 'callerMaxInflight', defaultText: '0', meaning: 'most calls one caller may have at the app at once; the rest wait; 0 = no limit', parse: integerIn(0, 1_000_000), fallback: fixed(0) }),
  variable({ name: 'MAX_BODY_BYTES', key: 'maxBodyBytes', defaultText: '67108864', meaning: 'largest request body; beyond it 413', parse: integerIn(0, 64 * GIB), fallback: fixed(67_108_864) }),
  variable({ name: 'ENVELOPE_MAX_BODY_BYTES', key: 'envelopeMaxBodyBytes', defaultText: '33554432', meaning: 'largest 2xx app body the cortex envelope wraps; beyond it 502', parse: integerIn(0, GIB), fallback: fixed(33_554_432) }),
  variable({ name: 'DEADLINE_SECONDS', key: 'deadlineSeconds', defaultText: '0', meaning: 'longest a request may run; 0 = none', parse: numberUpTo(MAX_SECONDS), fallback: fixed(0) }),
  variable({ name: 'APP_READY_TIMEOUT_SECONDS', key: 'appReadyTimeoutSeconds', defaultText: '300', meaning: "longest a call waits for the app's first readiness; past it 503 app not ready; 0 = no bound", parse: numberUpTo(MAX_SECONDS), fallback: fixed(300) }),
  variable({ name: 'RESPONSE_GRACE_PERIOD_SECONDS', key: 'responseGracePeriodSeconds', defaultText: '900', meaning: 'on SIGTERM, how long in-flight work may finish', parse: numberUpTo(MAX_SECONDS), fallback: fixed(900) }),
  variable({ name: 'READYCHECK_PATH', key: 'readycheckPath', defaultText: undefined, meaning: 'app path probed for readiness; unset = TCP connect', parse: optionalString(parseHttpPath), fallback: fixed(undefined) }),
  variable({ name: 'HEALTHCHECK_PATH', key: 'healthcheckPath', defaultText: undefined, meaning: 'app path probed for health; unset = TCP connect', parse: optionalString(parseHttpPath), fallback: fixed(undefined) }),
  variable({ name: 'APP_CANCEL_PATH', key: 'appCancelPath', defaultText: undefined, meaning: 'app path POSTed when a call at the app is canceled ({run_id}: its run id), e.g. /predictions/{run_id}/cancel', parse: optionalString(parseHttpPath), fallback: fixed(undefined) }),
  variable({ name: 'ALLOW_QUERY_TOKEN', key: 'allowQueryToken', defaultText: 'false', meaning: 'also accept the token as ?access_token=', parse: parseBoolean, fallback: fixed(false) }),
  variable({ name: 'SSE_HEARTBEAT_SECONDS', key: 'sseHeartbeatSeconds', defaultText: '15', meaning: 'idle time before an SSE keep-alive comment', parse: numberUpTo(86_400), fallback: fixed(15) }),
  variable({ name: 'WEBHOOK_ATTEMPTS', key: 'webhookAttempts', defaultText: '3', meaning: 'webhook delivery attempts in total', parse: integerIn(1, 100), fallback: fixed(3) }),
  variable({ name: 'WEBHOOK_MAX_DELAY_MS', key: 'webhookMaxDelayMs', defaultText: '5000', meaning: 'longest pause between webhook attempts', parse: integerIn(0, 3_600_000), fallback: fixed(5000) }),
  variable({ name: 'WEBHOOK_TIMEOUT_MS', key: 'webhookTimeoutMs', defaultText: '10000', meaning: "one webhook attempt's time limit", parse: integerIn(1, 3_600_000), fallback: fixed(10_000) }),
  variable({ name: 'WEBHOOK_MAX_BODY_BYTES', key: 'webhookMaxBodyBytes', defaultText: '10485760', meaning: 'largest response kept for a webhook', parse: integerIn(0, GIB), fallback: fixed(10_485_760) }),
  variable({ name: 'WEBHOOK_HEADER_BRAND', key: 'webhookHeaderBrand', defaultText: 'Service', meaning: 'the word in X-<Brand>-Webhook-* headers', parse: parseHeaderBrand, fallback: fixed('Service') }),
  variable({ name: 'WEBHOOK_ALLOWED_CIDRS', key: 'webhookAllowedCidrs', defaultText: undefined, meaning: 'private ranges webhooks may reach, comma-separated', parse: parseCidrList, fallback: () => [] }),
  variable({ name: 'WEBHOOK_STANDARD_HEADERS', key: 'webhookStandardHeaders', defaultText: 'false', meaning: 'also send Standard Webhooks headers (webhook-id/-timestamp/-signature)', parse: parseBoolean, fallback: fixed(false) }),
  // 1000 × ~7 KB of heap per pending delivery ≈ 7 MB; bodies have their own 32 MiB bound (MAX_PENDING_BYTES, webhook-sender.ts)
  variable({ name: 'WEBHOOK_MAX_PENDING', key: 'webhookMaxPending', defaultText: '1000', meaning: 'most webhook deliveries pending at once; beyond it dropped', parse: integerIn(1, 100_000), fallback: fixed(1000) }),
  variable({ name: 'RUN_STORE_URL', key: 'runStoreUrl', defaultText: undefined, meaning: 'redis://[user:pass@]host:port[/db], redis+sentinel://host:port[,…]/<master>[/db] or redis+cluster://host:port[,…], shared by every replica; unset = memory', parse: parseRunStoreAddress, fallback: fixed(undefined) }),
  variable({ name: 'HOSTNAME', key: 'replicaName', defaultText: 'a random id', meaning: "this replica's name in the run store (connections, consumer)", parse: optionalString(parseId), fallback: fixed(undefined) }),
  // at least 3 heartbeats (RUN_HEARTBEAT_SECONDS, 10 s): one late beat never makes a live sidecar look dead
  variable({ name: 'RUN_LOST_AFTER_SECONDS', key: 'runLostAfterSeconds', defaultText: '30', meaning: 'a sidecar silent this long is taken for dead by the others (its runs fail "replica lost")', parse: integerIn(30, MAX_SECONDS), fallback: fixed(30) }),
  variable({ name: 'RUN_RETENTION_SECONDS', key: 'runRetentionSeconds', defaultText: '3600', meaning: "how long a finished run's record and events stay readable", parse: integerIn(1, MAX_SECONDS), fallback: fixed(3600) }),
  variable({ name: 'RUN_MAX_EVENTS', key: 'runMaxEvents', defaultText: '10000', meaning: 'most events kept per streamed run; the oldest go first', parse: integerIn(1, 10_000_000), fallback: fixed(10_000) }),
  variable({ name: 'RUN_MAX_EVENT_BYTES', key: 'runMaxEventBytes', defaultText: '67108864', meaning: 'most bytes of events kept per streamed run; the oldest go first', parse: integerIn(1, 64 * GIB), fallback: fixed(67_108_864) }),
  variable({ name: 'ASYNC_QUEUE_DEPTH', key: 'asyncQueueDepth', defaultText: '10000', meaning: 'most async runs waiting per app; beyond it 503', parse: integerIn(0, 10_000_000), fallback: fixed(10_000) }),
  // at least one read of the app's body (64 KiB), so an event only ever ends in the read that passes the bound; at most
  // what one Redis command can carry twice (the event and its live message) within V8's longest string
  variable({ name: 'STREAM_MAX_EVENT_BYTES', key: 'streamMaxEventBytes', defaultText: '16777216', meaning: 'longest single event assembled (an NDJSON line); beyond it the stream ends with an error event', parse: integerIn(65_536, 134_217_728), fallback: fixed(16_777_216) }),
  variable({ name: 'RUN_MAX_READERS', key: 'runMaxReaders', defaultText: '1000', meaning: 'most readers of run events this replica serves at once; beyond it 503', parse: integerIn(1, 1_000_000), fallback: fixed(1000) }),
  variable({ name: 'ASYNC_QUEUE_MAX_BYTES', key: 'asyncQueueMaxBytes', defaultText: '268435456', meaning: 'most request-body bytes of async runs waiting per app; beyond it 503, one larger body 413', parse: integerIn(0, 64 * GIB), fallback: fixed(268_435_456) }),
  variable({ name: 'ASYNC_QUEUE_TTL_SECONDS', key: 'asyncQueueTtlSeconds', defaultText: '86400', meaning: 'an async run still queued this long after its submission fails (504)', parse: integerIn(1, MAX_SECONDS), fallback: fixed(86_400) }),
  variable({ name: 'RUN_MAX_ATTEMPTS', key: 'runMaxAttempts', defaultText: '1 (3 for an interruptible build)', meaning: 'attempts an async run may have when its replica is interrupted (stopped, lost, app unreachable); a shared run store only', parse: integerIn(1, 10), fallback: fixed(1) }),
  variable({ name: 'RUN_ACCESS', key: 'runAccess', defaultText: 'project', meaning: 'who may read, list and cancel a recorded run: project (any token of its project) or caller (only the sub that submitted it; others get 404)', parse: oneOf(RUN_ACCESS_MODES), fallback: fixed<RunAccess>('project') }),
  variable({ name: 'CORS_ALLOWED_ORIGINS', key: 'corsAllowedOrigins', defaultText: undefined, meaning: 'origins (comma-separated, or *) whose browser pages may call /v4; unset = no CORS', parse: parseOriginList, fallback: fixed(undefined) }),
  variable({ name: 'CONSOLE_TOKEN', key: 'consoleToken', defaultText: undefined, meaning: 'turns on the operator console at /console on ADMIN_PORT (its login token, 16+ characters); unset = no console', parse: optionalString(parseConsoleToken), fallback: fixed(undefined) }),
  variable({ name: 'LOG_LEVEL', key: 'logLevel', defaultText: 'info', meaning: LOG_LEVELS.join(' | '), parse: oneOf(LOG_LEVELS), fallback: fixed<LogLevel>('info') }),
  variable({ name: 'OTEL_SDK_DISABLED', key: 'otelSdkDisabled', defaultText: 'false', meaning: 'true: no tracing even with an endpoint set', parse: parseBoolean, fallback: fixed(false) }),
  variable({ name: 'OTEL_EXPORTER_OTLP_ENDPOINT', key: 'otelEndpoint', defaultText: undefined, meaning: 'OTLP/HTTP collector base URL; spans go to $it/v1/traces; unset = no tracing', parse: parseHttpUrl, fallback: fixed(undefined) }),
  variable({ name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', key: 'otelTracesEndpoint', defaultText: '$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces', meaning: 'the full URL spans are POSTed to', parse: parseHttpUrl, fallback: p => p.otelEndpoint === undefined ? undefined : underUrl(p.otelEndpoint, 'v1/traces') }),
  variable({ name: 'OTEL_EXPORTER_OTLP_PROTOCOL', key: 'otelProtocol', defaultText: 'http/protobuf', meaning: OTLP_PROTOCOLS.join(' | ') + ' (grpc is not offered)', parse: oneOf(OTLP_PROTOCOLS), fallback: fixed<OtlpProtocol>('http/protobuf') }),
  variable({ name: 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', key: 'otelTracesProtocol', defaultText: '$OTEL_EXPORTER_OTLP_PROTOCOL', meaning: 'the same, for traces alone', parse: oneOf(OTLP_PROTOCOLS), fallback: p => p.otelProtocol ?? 'http/protobuf' }),
  variable({ name: 'OTEL_SERVICE_NAME', key: 'otelServiceName', defaultText: 'app-sidecar', meaning: "the spans' service.name", parse: parseServiceName, fallback: fixed('app-sidecar') }),
  variable({ name: 'OTEL_TRACES_SAMPLER', key: 'otelTracesSampler', defaultText: 'parentbased_always_on', meaning: TRACE_SAMPLERS.join(' | '), parse: oneOf(TRACE_SAMPLERS), fallback: fixed<TraceSampler>('parentbased_always_on') }),
  variable({ name: 'OTEL_TRACES_SAMPLER_ARG', key: 'otelTracesSamplerArg', defaultText: '1', meaning: 'the ratio of the traceidratio samplers, 0 to 1', parse: numberUpTo(1), fallback: fixed(1) }),
  variable({ name: 'OTEL_BSP_SCHEDULE_DELAY', key: 'otelScheduleDelayMs', defaultText: '5000', meaning: 'ms between span exports', parse: integerIn(0, 3_600_000), fallback: fixed(5000) }),
  variable({ name: 'BUILD_ID', key: 'buildId', defaultText: undefined, meaning: 'with PROJECT_ID and APP_ID: read app settings from this build at start', parse: optionalString(parseId), fallback: fixed(undefined) }),
  variable({ name: 'APP_ID', key: 'appId', defaultText: undefined, meaning: 'the app whose build BUILD_ID names', parse: optionalString(parseId), fallback: fixed(undefined) }),
  variable({ name: 'STORE_TOKEN', key: 'storeToken', defaultText: undefined, meaning: 'bearer token for reading the build (a service-account token of the project)', parse: optionalString(parseBearerToken), fallback: fixed(undefined) })
] as const

const DEFAULT_STORE_URL = new URL('http://127.0.0.1:7070')

function parseServiceName (name: string, raw: string): string {
  const value = raw.trim()
  if (value === '' || value.length > 255) throw new ConfigError(name, 'must be 1 to 255 characters')
  return value
}

// typed by hand at the console's login: long enough not to be guessed, no character a form or a header would mangle
function parseConsoleToken (name: string, raw: string): string {
  if (raw.length < 16 || !/^[\x21-\x7e]+$/.test(raw)) throw new ConfigError(name, 'must be 16 or more visible ASCII characters')
  return raw
}

/**
 * Reads every sidecar variable from `env`. An empty value counts as unset.
 * Throws a ConfigError naming the first invalid variable.
 */
export function loadSidecarConfig (env: NodeJS.ProcessEnv = process.env): SidecarConfig {
  const config = loadEnvTable(SIDECAR_VARIABLES as ReadonlyArray<EnvVariable<SidecarConfig>>, env)
  if (config.port !== 0 && config.port === config.adminPort) {
    throw new ConfigError('ADMIN_PORT', `must differ from PORT (${config.port})`)
  }
  if (config.buildId !== undefined && (config.projectId === undefined || config.appId === undefined)) {
    throw new ConfigError('BUILD_ID', 'needs PROJECT_ID and APP_ID too')
  }
  // a shared store holds many apps' runs: a sidecar takes only its own app's (APP_NAME may come from BUILD_ID's build)
  if (config.runStoreUrl !== undefined && (config.projectId === undefined || (config.appName === undefined && config.buildId === undefined))) {
    throw new ConfigError('RUN_STORE_URL', 'needs PROJECT_ID and APP_NAME too (a shared run store serves one app per sidecar)')
  }
  // the console shows one app's runs
  if (config.consoleToken !== undefined && (config.projectId === undefined || config.appName === undefined)) {
    throw new ConfigError('CONSOLE_TOKEN', 'needs PROJECT_ID and APP_NAME too (the console shows one app)')
  }
  return config
}

/** The `--help` text: every variable with its default and meaning. */
export function sidecarHelp (): string {
  const rows = envHelpRows(SIDECAR_VARIABLES as ReadonlyArray<EnvVariable<SidecarConfig>>, 36, 40)
  return [
    'app-sidecar: reverse-proxy sidecar beside one app replica.',
    '',
    'Usage: app-sidecar [--help | --version]        (configured by environment variables)',
    '',
    `  ${'VARIABLE'.padEnd(36)}${'DEFAULT'.padEnd(40)}MEANING`,
    ...rows,
    '',
    'Public routes: /v4/{project_id}/{app_name}/{path...} (HTTP and WebSocket), GET|HEAD /v2/...',
    'Admin routes:  /livez /healthz /readyz /metrics on ADMIN_PORT (and /console with CONSOLE_TOKEN)',
    ''
  ].join('\n')
}
