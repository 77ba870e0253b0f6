import t from 'tap'
import { loadSidecarConfig, sidecarHelp, SIDECAR_VARIABLES } from '../../src/config/sidecar-config.ts'
import { ConfigError } from '../../src/errors.ts'

t.test('defaults match the SPEC table', async t => {
  const c = loadSidecarConfig({})
  t.equal(c.port, 8000)
  t.equal(c.adminPort, 9090)
  t.equal(c.host, '0.0.0.0')
  t.equal(c.appUrl.href, 'http://127.0.0.1:8192/')
  t.equal(c.storeUrl.href, 'http://127.0.0.1:7070/')
  t.equal(c.projectId, undefined)
  t.equal(c.appName, undefined)
  t.equal(c.runtime, 'cortex')
  t.equal(c.disableAuth, false)
  t.equal(c.authJwksUrl.href, 'http://127.0.0.1:7070/.well-known/jwks.json')
  t.equal(c.replicaConcurrency, 0)
  t.equal(c.queueDepth, 1000)
  t.equal(c.maxBodyBytes, 67108864)
  t.equal(c.deadlineSeconds, 0)
  t.equal(c.responseGracePeriodSeconds, 900)
  t.equal(c.readycheckPath, undefined)
  t.equal(c.healthcheckPath, undefined)
  t.equal(c.appCancelPath, undefined)
  t.equal(c.allowQueryToken, false)
  t.equal(c.sseHeartbeatSeconds, 15)
  t.equal(c.webhookAttempts, 3)
  t.equal(c.webhookMaxDelayMs, 5000)
  t.equal(c.webhookTimeoutMs, 10000)
  t.equal(c.webhookMaxBodyBytes, 10485760)
  t.equal(c.webhookHeaderBrand, 'Service')
  t.same(c.webhookAllowedCidrs, [])
  t.equal(c.webhookMaxPending, 1000)
  t.equal(c.runStoreUrl, undefined)
  t.equal(c.runRetentionSeconds, 3600)
  t.equal(c.runMaxEvents, 10000)
  t.equal(c.runMaxEventBytes, 67108864)
  t.equal(c.asyncQueueDepth, 10000)
  t.equal(c.streamMaxEventBytes, 16777216)
  t.equal(c.runMaxReaders, 1000)
  t.equal(c.asyncQueueMaxBytes, 268435456)
  t.equal(c.runMaxAttempts, 1)
  t.equal(c.runAccess, 'project')
  t.equal(c.logLevel, 'info')
})

t.test('RUN_ACCESS: project or caller; anything else refused naming it', async t => {
  t.equal(loadSidecarConfig({ RUN_ACCESS: 'caller' }).runAccess, 'caller')
  t.equal(loadSidecarConfig({ RUN_ACCESS: ' project ' }).runAccess, 'project')
  t.equal(loadSidecarConfig({ RUN_ACCESS: '' }).runAccess, 'project', 'empty counts as unset')
  for (const raw of ['Caller', 'sub', 'owner', 'project,caller']) {
    t.throws(() => loadSidecarConfig({ RUN_ACCESS: raw }), { name: 'ConfigError', message: `RUN_ACCESS: expected one of project, caller, got "${raw}"` }, raw)
  }
})

t.test('RUN_MAX_ATTEMPTS: 1 to 10; anything else refused naming it', async t => {
  t.equal(loadSidecarConfig({ RUN_MAX_ATTEMPTS: '3' }).runMaxAttempts, 3)
  t.equal(loadSidecarConfig({ RUN_MAX_ATTEMPTS: '10' }).runMaxAttempts, 10)
  t.equal(loadSidecarConfig({ RUN_MAX_ATTEMPTS: '' }).runMaxAttempts, 1, 'empty counts as unset')
  for (const raw of ['0', '11', '2.5', 'three', '-1']) {
    t.throws(() => loadSidecarConfig({ RUN_MAX_ATTEMPTS: raw }), { name: 'ConfigError', message: `RUN_MAX_ATTEMPTS: expected a whole number from 1 to 10, got "${raw}"` }, raw)
  }
})

t.test('APP_CANCEL_PATH: an app path starting with /, {run_id} kept as written; anything else refused naming it', async t => {
  t.equal(loadSidecarConfig({ APP_CANCEL_PATH: '/predictions/{run_id}/cancel' }).appCancelPath, '/predictions/{run_id}/cancel')
  t.equal(loadSidecarConfig({ APP_CANCEL_PATH: '' }).appCancelPath, undefined, 'empty counts as unset')
  for (const raw of ['predictions/{run_id}/cancel', 'http://app/cancel', '/with space/{run_id}', ' /lead']) {
    t.throws(() => loadSidecarConfig({ APP_CANCEL_PATH: raw }), { name: 'ConfigError', message: /^APP_CANCEL_PATH: expected an absolute path starting with "\/"/ }, raw)
  }
})

t.test('RUN_STORE_URL takes redis:// and rediss:// URLs; the password never shows in an error', async t => {
  const scope = { PROJECT_ID: 'p', APP_NAME: 'a' }
  t.equal(loadSidecarConfig({ ...scope, RUN_STORE_URL: 'redis://127.0.0.1:6379/3' }).runStoreUrl?.text, 'redis://127.0.0.1:6379/3')
  t.match(loadSidecarConfig({ ...scope, RUN_STORE_URL: 'rediss://user:s3cret@redis.internal:6380' }).runStoreUrl,
    { topology: 'single', url: { password: 's3cret', hostname: 'redis.internal' }, text: 'rediss://user@redis.internal:6380' })
  t.match(loadSidecarConfig({ ...scope, RUN_STORE_URL: 'redis://redis' }).runStoreUrl, { topology: 'single', url: { hostname: 'redis' } })
  for (const raw of ['http://redis:6379', 'redis://:s3cret@redis:6379/x', 'redis://:s3cret@redis:6379/1/2', 'redis://:s3cret@redis:6379/1#f', 'not a url s3cret']) {
    let message = ''
    try { loadSidecarConfig({ ...scope, RUN_STORE_URL: raw }) } catch (error) { message = (error as Error).message }
    t.match(message, /^RUN_STORE_URL: expected /, raw)
    t.notMatch(message, 's3cret', `${raw}: no password in the error`)
  }
})

t.test('RUN_STORE_URL needs PROJECT_ID and APP_NAME (APP_NAME may come from BUILD_ID\'s build)', async t => {
  const url = 'redis://127.0.0.1:6379/0'
  for (const env of [{}, { PROJECT_ID: 'p' }, { APP_NAME: 'a' }]) {
    t.throws(() => loadSidecarConfig({ RUN_STORE_URL: url, ...env }), /^RUN_STORE_URL: needs PROJECT_ID and APP_NAME too/, JSON.stringify(env))
  }
  t.equal(loadSidecarConfig({ RUN_STORE_URL: url, PROJECT_ID: 'p', BUILD_ID: 'b', APP_ID: 'i' }).appName, undefined, 'the build names the app')
  t.same([loadSidecarConfig({ RUN_STORE_URL: url, PROJECT_ID: 'p', APP_NAME: 'a' }).projectId, loadSidecarConfig({ APP_NAME: 'a' }).runStoreUrl], ['p', undefined])
})

t.test('the OTEL_* variables: tracing is off unless an endpoint is set; the traces URL is the endpoint\'s /v1/traces', async t => {
  const off = loadSidecarConfig({})
  t.equal(off.otelTracesEndpoint, undefined)
  t.equal(off.otelServiceName, 'app-sidecar')
  t.equal(off.otelTracesSampler, 'parentbased_always_on')
  t.equal(off.otelTracesSamplerArg, 1)
  t.equal(off.otelScheduleDelayMs, 5000)
  t.equal(off.otelSdkDisabled, false)
  t.equal(loadSidecarConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).otelTracesEndpoint?.href, 'http://collector:4318/v1/traces')
  t.equal(loadSidecarConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://otlp.example/base/' }).otelTracesEndpoint?.href, 'https://otlp.example/base/v1/traces')
  t.equal(loadSidecarConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:9999/traces' }).otelTracesEndpoint?.href,
    'http://b:9999/traces', 'the traces endpoint is used as given')
  const on = loadSidecarConfig({ OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25', OTEL_SERVICE_NAME: ' gpu ', OTEL_BSP_SCHEDULE_DELAY: '100', OTEL_SDK_DISABLED: 'true' })
  t.same([on.otelTracesSampler, on.otelTracesSamplerArg, on.otelServiceName, on.otelScheduleDelayMs, on.otelSdkDisabled], ['parentbased_traceidratio', 0.25, 'gpu', 100, true])
})

t.test('CORS_ALLOWED_ORIGINS: unset, *, or origins kept as a browser spells them', async t => {
  t.equal(loadSidecarConfig({}).corsAllowedOrigins, undefined, 'unset: no CORS')
  t.equal(loadSidecarConfig({ CORS_ALLOWED_ORIGINS: ' * ' }).corsAllowedOrigins, '*')
  t.same(loadSidecarConfig({ CORS_ALLOWED_ORIGINS: ' https://App.Example.com , http://localhost:5173/,https://b.example:443,' }).corsAllowedOrigins,
    ['https://app.example.com', 'http://localhost:5173', 'https://b.example'], 'lower-case host, no trailing slash, no default port')
  for (const raw of ['app.example.com', 'https://a.example/path', 'https://a.example?x', 'https://a.example/#', 'ftp://a.example', 'https://u:p@a.example', '*,https://a.example', ',', 'null']) {
    t.throws(() => loadSidecarConfig({ CORS_ALLOWED_ORIGINS: raw }), { name: 'ConfigError', message: /^CORS_ALLOWED_ORIGINS: expected / }, raw)
  }
})

t.test('derived defaults follow the values they depend on', async t => {
  t.equal(loadSidecarConfig({ REPLICA_CONCURRENCY: '4' }).queueDepth, 40)
  t.equal(loadSidecarConfig({ REPLICA_CONCURRENCY: '4', QUEUE_DEPTH: '7' }).queueDepth, 7)
  t.equal(loadSidecarConfig({ STORE_URL: 'http://store:7070/base' }).authJwksUrl.href, 'http://store:7070/base/.well-known/jwks.json')
  t.equal(loadSidecarConfig({ AUTH_JWKS_URL: 'https://keys.example/jwks' }).authJwksUrl.href, 'https://keys.example/jwks')
})

t.test('every value is parsed to its type', async t => {
  const c = loadSidecarConfig({
    PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', APP_URL: 'https://app.internal:8443/prefix',
    PROJECT_ID: 'p-1', APP_NAME: 'my.app', RUNTIME: 'custom', DISABLE_AUTH: 'TRUE',
    REPLICA_CONCURRENCY: '8', MAX_BODY_BYTES: '1024', DEADLINE_SECONDS: '2.5',
    RESPONSE_GRACE_PERIOD_SECONDS: '30', READYCHECK_PATH: '/ready', HEALTHCHECK_PATH: '/health',
    ALLOW_QUERY_TOKEN: '1', SSE_HEARTBEAT_SECONDS: '0.5', WEBHOOK_ATTEMPTS: '5', WEBHOOK_MAX_DELAY_MS: '0',
    WEBHOOK_TIMEOUT_MS: '250', WEBHOOK_MAX_BODY_BYTES: '0', WEBHOOK_HEADER_BRAND: 'Acme-Cloud',
    WEBHOOK_ALLOWED_CIDRS: ' 127.0.0.0/8 , fd00::/8,', WEBHOOK_MAX_PENDING: '250', LOG_LEVEL: 'silent'
  })
  t.equal(c.appUrl.href, 'https://app.internal:8443/prefix')
  t.equal(c.runtime, 'custom')
  t.equal(c.disableAuth, true)
  t.equal(c.deadlineSeconds, 2.5)
  t.equal(c.allowQueryToken, true)
  t.equal(c.queueDepth, 80)
  t.same(c.webhookAllowedCidrs, [{ address: '127.0.0.0', prefix: 8, family: 4 }, { address: 'fd00::', prefix: 8, family: 6 }])
  t.equal(c.webhookHeaderBrand, 'Acme-Cloud')
  t.equal(c.webhookMaxPending, 250)
  t.equal(c.logLevel, 'silent')
})

t.test('an empty value counts as unset', async t => {
  t.equal(loadSidecarConfig({ PORT: '', RUNTIME: '' }).port, 8000)
})

const invalid: Array<[string, string]> = [
  ['PORT', 'abc'], ['PORT', '70000'], ['PORT', '-1'], ['PORT', '80.5'], ['ADMIN_PORT', '1e3'],
  ['APP_URL', 'not a url'], ['APP_URL', 'ftp://x'], ['APP_URL', 'http://user:pw@app'], ['APP_URL', 'http://app/?q=1'],
  ['STORE_URL', 'localhost:7070'], ['AUTH_JWKS_URL', 'file:///etc/keys'],
  ['PROJECT_ID', '../etc'], ['APP_NAME', 'a/b'], ['APP_NAME', '.hidden'],
  ['RUNTIME', 'python'], ['DISABLE_AUTH', 'maybe'], ['ALLOW_QUERY_TOKEN', 'yes please'],
  ['REPLICA_CONCURRENCY', '-2'], ['QUEUE_DEPTH', 'ten'], ['MAX_BODY_BYTES', '1.5'],
  ['DEADLINE_SECONDS', '-1'], ['DEADLINE_SECONDS', 'soon'], ['RESPONSE_GRACE_PERIOD_SECONDS', '1e9'],
  ['READYCHECK_PATH', 'ready'], ['HEALTHCHECK_PATH', '/he alth'], ['SSE_HEARTBEAT_SECONDS', 'x'],
  ['WEBHOOK_ATTEMPTS', '0'], ['WEBHOOK_MAX_DELAY_MS', '-5'], ['WEBHOOK_TIMEOUT_MS', '0'],
  ['WEBHOOK_MAX_BODY_BYTES', 'big'], ['WEBHOOK_HEADER_BRAND', 'Bad Brand'], ['WEBHOOK_HEADER_BRAND', '-x'],
  ['WEBHOOK_ALLOWED_CIDRS', '10.0.0.0'], ['WEBHOOK_ALLOWED_CIDRS', '10.0.0.0/33'], ['WEBHOOK_ALLOWED_CIDRS', 'fd00::/129'],
  ['WEBHOOK_ALLOWED_CIDRS', 'example.com/8'], ['WEBHOOK_ALLOWED_CIDRS', '10.0.0.0/8/1'],
  ['WEBHOOK_MAX_PENDING', '0'], ['WEBHOOK_MAX_PENDING', '-1'], ['WEBHOOK_MAX_PENDING', '1.5'], ['WEBHOOK_MAX_PENDING', '100001'],
  ['WEBHOOK_MAX_PENDING', 'many'], ['LOG_LEVEL', 'verbose'],
  ['RUN_STORE_URL', 'postgres://db'], ['RUN_RETENTION_SECONDS', '0'], ['RUN_RETENTION_SECONDS', '1.5'],
  ['RUN_MAX_EVENTS', '0'], ['RUN_MAX_EVENTS', 'lots'], ['ASYNC_QUEUE_DEPTH', '-1'], ['ASYNC_QUEUE_DEPTH', '10000001'],
  ['STREAM_MAX_EVENT_BYTES', '65535'], ['STREAM_MAX_EVENT_BYTES', '134217729'], ['STREAM_MAX_EVENT_BYTES', '16MiB'], ['RUN_MAX_READERS', '0'], ['RUN_MAX_READERS', '1000001'],
  ['RUN_MAX_EVENT_BYTES', '0'], ['RUN_MAX_EVENT_BYTES', '1.5'], ['RUN_MAX_EVENT_BYTES', '68719476737'],
  ['ASYNC_QUEUE_MAX_BYTES', '-1'], ['ASYNC_QUEUE_MAX_BYTES', 'big'], ['ASYNC_QUEUE_MAX_BYTES', '68719476737'],
  ['OTEL_SDK_DISABLED', 'sure'], ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318'], ['OTEL_EXPORTER_OTLP_ENDPOINT', 'grpc://collector:4317'],
  ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'http://user:token@collector/v1/traces'], ['OTEL_SERVICE_NAME', ' '],
  ['OTEL_SERVICE_NAME', 'x'.repeat(256)], ['OTEL_TRACES_SAMPLER', 'jaeger_remote'], ['OTEL_TRACES_SAMPLER_ARG', '1.5'],
  ['OTEL_TRACES_SAMPLER_ARG', '-0.1'], ['OTEL_BSP_SCHEDULE_DELAY', 'soon'], ['OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc'],
  ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'http/thrift'], ['CORS_ALLOWED_ORIGINS', 'https://a.example/app']
]
for (const [name, value] of invalid) {
  t.test(`${name}=${JSON.stringify(value)} is refused with an error naming it`, async t => {
    let caught: unknown
    try { loadSidecarConfig({ [name]: value }) } catch (error) { caught = error }
    t.type(caught, ConfigError)
    t.equal((caught as ConfigError).variable, name)
    t.ok((caught as Error).message.startsWith(`${name}: `), (caught as Error).message)
    t.equal((caught as Error).message.split('\n').length, 1, 'one line')
  })
}

t.test('PORT and ADMIN_PORT must differ', async t => {
  t.throws(() => loadSidecarConfig({ PORT: '9000', ADMIN_PORT: '9000' }), { name: 'ConfigError', message: 'ADMIN_PORT: must differ from PORT (9000)' })
  t.doesNotThrow(() => loadSidecarConfig({ PORT: '0', ADMIN_PORT: '0' }))
})

t.test('--help lists every variable with its default', async t => {
  const help = sidecarHelp()
  for (const v of SIDECAR_VARIABLES) {
    t.match(help, new RegExp(`^  ${v.name} +${(v.defaultText ?? 'unset').replace(/[$.*+?()[\]{}|\\^]/g, '\\$&')} `, 'm'), v.name)
  }
})
