import t from 'tap'
import { MalformedRequestError } from '../../src/errors.ts'
import { MAX_WEBHOOK_URL_LENGTH, parseWebhookEndpoint } from '../../src/webhook/webhook-endpoint.ts'
import { startWebhookReceiver } from '../helpers/webhook-receiver.ts'
import { eventually } from '../helpers/sidecar-harness.ts'
import { call, deliveriesFinished, LOOPBACK_ENV, sidecarFor, startWebhookApp, webhookCounts } from './webhook-kit.ts'

/** An http URL of exactly `length` characters. */
const urlOfLength = (base: string, length: number): string => base + '/' + 'a'.repeat(length - base.length - 1)

const MALFORMED: Array<[string, string]> = [
  ['', 'empty'],
  ['/hook', 'relative path'],
  ['hook', 'bare word'],
  ['//example.com/hook', 'scheme-relative'],
  ['ftp://example.com/hook', 'ftp'],
  ['javascript:alert(1)', 'javascript'],
  ['file:///etc/passwd', 'file'],
  ['data:text/plain,hi', 'data'],
  ['ws://example.com/hook', 'ws'],
  ['http://', 'no host'],
  ['http://user:pw@example.com/', 'user and password'],
  ['http://user@example.com/', 'user only'],
  ['https://:pw@example.com/', 'password only'],
  ['http://@example.com/', 'empty user-info'],
  ['http://exa mple.com/', 'space in host'],
  [urlOfLength('https://example.com', MAX_WEBHOOK_URL_LENGTH + 1), 'one character too long']
]

t.test('parseWebhookEndpoint: absolute http(s) URLs are accepted as URL objects', async t => {
  t.equal(MAX_WEBHOOK_URL_LENGTH, 2048)
  const plain = parseWebhookEndpoint('https://hooks.example.com/in?x=1&y=two#frag')
  t.equal(plain.protocol, 'https:')
  t.equal(plain.host, 'hooks.example.com')
  t.equal(plain.pathname + plain.search, '/in?x=1&y=two')
  t.equal(parseWebhookEndpoint('http://127.0.0.1:8080/hook').host, '127.0.0.1:8080')
  t.equal(parseWebhookEndpoint('HTTP://EXAMPLE.com').href, 'http://example.com/', 'scheme and host are case-insensitive')
  t.equal(parseWebhookEndpoint('http://[::1]:9/x').hostname, '[::1]')
  t.equal(parseWebhookEndpoint('http://example.com/a@b').pathname, '/a@b', 'an @ in the path is not user-info')
  t.equal(parseWebhookEndpoint('http://example.com/?to=a@b').search, '?to=a@b', 'an @ in the query is not user-info')
  const exact = urlOfLength('https://example.com', MAX_WEBHOOK_URL_LENGTH)
  t.equal(exact.length, 2048)
  t.equal(parseWebhookEndpoint(exact).href, exact, 'exactly 2048 characters is accepted')
})

t.test('parseWebhookEndpoint: everything else is a 400 MalformedRequestError', async t => {
  for (const [raw, why] of MALFORMED) {
    let thrown: unknown
    try { parseWebhookEndpoint(raw) } catch (error) { thrown = error }
    t.ok(thrown instanceof MalformedRequestError, why)
    t.equal((thrown as MalformedRequestError).status, 400, why)
    t.match((thrown as Error).message, /webhookEndpoint/, why)
  }
})

t.test('through the sidecar: a malformed webhookEndpoint is 400 {"message"} before the app is called', async t => {
  const app = await startWebhookApp()
  t.teardown(() => app.close())
  const receiver = await startWebhookReceiver()
  t.teardown(() => receiver.close())
  const h = await sidecarFor(t, app.url, LOOPBACK_ENV)

  const cases: Array<[string, string]> = [...MALFORMED,
    [`http://user:pw@127.0.0.1:${receiver.port}/hook`, 'user-info towards the receiver'],
    [`ftp://127.0.0.1:${receiver.port}/hook`, 'ftp towards the receiver']]
  for (const [raw, why] of cases) {
    const before = app.requests.length
    const r = await call(h, '/json', raw, { headers: { 'x-request-id': 'bad-endpoint' } })
    t.equal(r.status, 400, why)
    t.equal(r.headers['content-type'], 'application/json; charset=utf-8', why)
    t.same(Object.keys(r.json() as object), ['message'], why)
    t.match((r.json() as { message: string }).message, /webhookEndpoint/, why)
    t.equal(r.headers['x-request-id'], 'bad-endpoint', why)
    t.equal(app.requests.length, before, `${why}: the app was not called`)
  }

  const bare = await call(h, '/json?webhookEndpoint', undefined)
  t.equal(bare.status, 400, 'webhookEndpoint without a value')
  t.equal(app.requests.length, 0, 'the app never saw any of them')

  const ok = await call(h, '/json', urlOfLength(`${receiver.url}/hook`, 2048))
  t.equal(ok.status, 200, 'a 2048-character endpoint is accepted')
  t.equal(app.requests.length, 1)
  const [attempt] = await receiver.waitForAttempts(1)
  t.equal(`${receiver.url}${attempt?.url ?? ''}`.length, 2048, 'the full path reached the receiver')
  t.equal(receiver.connections(), 1, 'only the accepted endpoint got a connection')
  await eventually(async () => await deliveriesFinished(h) === 1)
  t.same((await webhookCounts(h)).deliveries, { delivered: 1 })
})
