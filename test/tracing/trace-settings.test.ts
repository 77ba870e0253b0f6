import pino from 'pino'
import t from 'tap'
import { loadSidecarConfig } from '../../src/config/sidecar-config.ts'
import { openTracer } from '../../src/tracing/open-tracer.ts'
import { traceSettingsOf } from '../../src/tracing/trace-settings.ts'

t.test('tracing is on only with an endpoint and without OTEL_SDK_DISABLED', async t => {
  t.equal(traceSettingsOf(loadSidecarConfig({})), undefined)
  t.equal(await openTracer(undefined, { logger: pino({ enabled: false }), failures: { inc: () => { t.fail('no failure without a tracer') } } }), undefined, 'no tracer, nothing loaded')
  t.equal(traceSettingsOf(loadSidecarConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' })), undefined)
  t.same(traceSettingsOf(loadSidecarConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', APP_URL: 'http://127.0.0.1:9000', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.5' })), {
    endpoint: new URL('http://c:4318/v1/traces'),
    protocol: 'http/protobuf',
    serviceName: 'app-sidecar',
    sampler: 'traceidratio',
    samplerArg: 0.5,
    scheduleDelayMs: 5000,
    appUrl: new URL('http://127.0.0.1:9000')
  })
  t.equal(traceSettingsOf(loadSidecarConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }))?.protocol, 'http/json')
  t.equal(traceSettingsOf(loadSidecarConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' }))?.protocol,
    'http/protobuf', 'the traces variable wins')
})
