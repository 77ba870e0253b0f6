import { createRequire } from 'node:module'
import t from 'tap'
import { send } from '../../helpers/http-client.ts'
import { startHarness } from '../../helpers/sidecar-harness.ts'
import { connectClient, nextMessage, startWebSocketApp } from '../../helpers/websocket-app.ts'

// The WebSocket stack (http-proxy and what it requires) is loaded at the first upgrade, not at
// start: most apps never take a WebSocket, and every replica would hold it. http-proxy is
// CommonJS, so whatever loaded it is in require.cache. Its own file: no other test may have
// loaded it in this process first.

const httpProxyLoaded = (): boolean => Object.keys(createRequire(import.meta.url).cache).some(path => path.includes('/node_modules/http-proxy/'))

t.test('http-proxy is loaded by the first upgrade, and that upgrade works', async t => {
  const app = await startWebSocketApp()
  const h = await startHarness(app.url, { DISABLE_AUTH: 'true' })
  t.teardown(async () => { await h.close(); await app.close() })
  t.equal((await send(`http://127.0.0.1:${h.sidecar.port}/v4/proj/app/x`, { method: 'POST', body: '{}' })).status, 200, 'a plain call')
  t.equal(httpProxyLoaded(), false, 'started and answered a call without loading http-proxy')

  const outcome = await connectClient(`ws://127.0.0.1:${h.sidecar.port}/v4/proj/app/echo`)
  if (outcome.kind !== 'open') throw new Error(`upgrade failed: ${JSON.stringify(outcome)}`)
  t.teardown(() => { outcome.ws.terminate() })
  const echoed = nextMessage(outcome.ws)
  outcome.ws.send('hello')
  t.equal((await echoed).data.toString(), 'hello', 'the first WebSocket echoes')
  t.equal(httpProxyLoaded(), true, 'http-proxy is loaded now')
})
