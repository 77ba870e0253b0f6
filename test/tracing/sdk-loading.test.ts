import { createRequire } from 'node:module'
import t from 'tap'
import { send } from '../helpers/http-client.ts'
import { startOtlpReceiver } from '../helpers/otlp-receiver.ts'
import { eventually, sidecarFor, startTestServer } from '../helpers/sidecar-harness.ts'

// Without OTEL_EXPORTER_OTLP_ENDPOINT the OpenTelemetry SDK is never loaded (docs/tracing.md,
// "Turning it on": it must cost no memory): these packages are CommonJS, so whatever loaded them
// is in require.cache. Its own file: the process must not have loaded them for another test first.

const SDK = ['@opentelemetry/sdk-trace/', '@opentelemetry/exporter-trace-otlp-proto/', '@opentelemetry/core/', '@opentelemetry/resources/', '@opentelemetry/exporter-trace-otlp-http/']
const loaded = (names = SDK): string[] => names.filter(name => Object.keys(createRequire(import.meta.url).cache).some(path => path.includes(`/node_modules/${name}`)))

t.test('no endpoint, no SDK; with one, the SDK is loaded as the sidecar starts', async t => {
  const app = await startTestServer((_req, res) => { res.end('ok') })
  t.teardown(() => app.close())
  const off = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', RUNTIME: 'custom' })
  await eventually(async () => (await send(`${off.admin}/readyz`)).status === 200)
  t.equal((await send(`${off.base}/v4/proj/app/x`, { headers: { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` } })).status, 200)
  t.same(loaded(), [], 'a traced call went through, and no SDK module was loaded')
  t.same(loaded(['@opentelemetry/api/']), [], 'nor the API (prom-client\'s index would load it: metrics/prom-core.ts)')
  t.equal(off.logs.find(line => line.msg === 'sidecar listening')?.tracing, 'off', 'the start-up line says tracing is off')

  const otlp = await startOtlpReceiver()
  t.teardown(() => otlp.close())
  const on = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url })
  t.equal(on.logs.find(line => line.msg === 'sidecar listening')?.tracing, `${otlp.url}/v1/traces`, 'and where spans go when it is on')
  t.same(loaded(), SDK.slice(0, 4), 'with an endpoint, the SDK and the protobuf exporter (the check can see them), not the JSON one')
})
