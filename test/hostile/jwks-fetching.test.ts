import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { RevocationList, REVOCATION_LIST_MAX_BYTES } from '../../src/auth/revocation-list.ts'
import { JWKS_MAX_BYTES, TokenVerifier } from '../../src/auth/token-verifier.ts'
import { createTokenIssuer, type TokenIssuer } from '../helpers/demo-token-issuer.ts'
import { StoreUnreachableError } from '../../src/errors.ts'
import { send } from '../helpers/http-client.ts'
import { startHarness, startTestServer } from '../helpers/sidecar-harness.ts'

// The build store's JWKS and revocation list, answered by a hostile or failing store: failures
// make one fetch per back-off window however many forged tokens arrive, and an oversized answer
// is cut off at its cap, never buffered.

const PROJECT = 'proj'
const UNREACHABLE = 'build store unreachable: token keys could not be fetched'
const MiB = 1024 * 1024

const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))

type Handler = (req: IncomingMessage, res: ServerResponse) => void

/** A store on loopback whose answer the test can change; counts the requests it got. */
interface Store {
  readonly url: URL
  requests: number
  /** When the last request arrived (epoch ms): no failure it caused can be older. */
  lastRequestAt: number
  handler: Handler
}

async function startStore (t: Test, handler: Handler): Promise<Store> {
  const store: Store = { url: new URL('http://127.0.0.1/'), requests: 0, lastRequestAt: 0, handler }
  const server = createServer((req, res) => {
    store.requests++
    store.lastRequestAt = Date.now()
    store.handler(req, res)
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    server.closeAllConnections()
    await new Promise(resolve => server.close(resolve))
  })
  Object.assign(store, { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`) })
  return store
}

const answer500: Handler = (_req, res) => { res.writeHead(500, { 'content-type': 'application/json' }).end('{"message":"internal error"}') }
const answerGarbage: Handler = (_req, res) => { res.writeHead(200, { 'content-type': 'application/json' }).end('not json') }
const answerKeys = (issuer: TokenIssuer): Handler => (_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(issuer.jwks))
}

/** Every result rejected with the 502 for unfetchable token keys (docs/errors.md, "Answers on the public port"). */
async function allUnreachable (t: Test, results: Array<Promise<void> | undefined>, label: string): Promise<void> {
  assertUnreachable(t, await Promise.allSettled(results.map(async result => { await result })), label)
}

/** Authorizes each token only once the one before it was answered, as a stream of callers would. */
async function oneAfterAnother (v: TokenVerifier, tokens: string[]): Promise<Array<PromiseSettledResult<void>>> {
  const settled: Array<PromiseSettledResult<void>> = []
  for (const token of tokens) settled.push(...await Promise.allSettled([v.authorize(token, PROJECT)]))
  return settled
}

function assertUnreachable (t: Test, settled: Array<PromiseSettledResult<void>>, label: string): void {
  const wrong = settled.filter(result => !(result.status === 'rejected' && result.reason instanceof StoreUnreachableError &&
    result.reason.status === 502 && result.reason.message === UNREACHABLE))
  t.equal(wrong.length, 0, `${label}: all ${settled.length} refused with 502 "${UNREACHABLE}"`)
}

t.test('a JWKS that cannot be fetched: one fetch per back-off window, however many forged tokens', async t => {
  const attacker = await createTokenIssuer()
  const forged = await Promise.all(Array.from({ length: 300 }, async () => await attacker.sign(PROJECT)))
  // the back-off must outlast 900 forged calls on a loaded machine, or "no fetch within the back-off" could not hold
  const backoffMs = 3000

  for (const [label, failing] of [['answering 500', answer500], ['answering 200 not-JSON', answerGarbage]] as const) {
    t.test(label, async t => {
      const store = await startStore(t, failing)
      const v = new TokenVerifier({ jwksUrl: store.url, retryAfterFailureMs: backoffMs })

      await allUnreachable(t, forged.map(token => v.authorize(token, PROJECT)), '300 concurrent')
      const failedBy = Date.now() // the back-off started between the store's answer and now
      t.equal(store.requests, 1, 'the concurrent calls shared one fetch')

      // the attack as it arrives through the sidecar: one forged token after another
      assertUnreachable(t, await oneAfterAnother(v, forged), '300 one after another')
      await allUnreachable(t, forged.map(token => v.authorize(token, PROJECT)), 'another 300 concurrent')
      t.ok(Date.now() - store.lastRequestAt < backoffMs, `still within the back-off (${Date.now() - store.lastRequestAt} ms)`)
      t.equal(store.requests, 1, 'no fetch within the back-off')

      await sleep(backoffMs - (Date.now() - failedBy) + 50)
      await allUnreachable(t, forged.map(token => v.authorize(token, PROJECT)), '300 concurrent after the back-off')
      t.equal(store.requests, 2, 'exactly one fetch after the back-off')

      // the store recovers: the back-off is not remembered beyond its window
      const issuer = await createTokenIssuer()
      store.handler = answerKeys(issuer)
      await sleep(backoffMs + 50)
      t.equal(await v.authorize(await issuer.sign(PROJECT), PROJECT), undefined, 'a valid token is accepted')
      t.equal(store.requests, 3)
    })
  }
})

t.test('a failed refetch for an unknown kid backs off too; keys already fetched keep working', async t => {
  const issuer = await createTokenIssuer()
  const store = await startStore(t, answerKeys(issuer))
  // no refetch cooldown: only the back-off after a failure can keep the unknown kids from refetching
  const v = new TokenVerifier({ jwksUrl: store.url, refetchCooldownMs: 0, retryAfterFailureMs: 5_000 })
  t.equal(await v.authorize(await issuer.sign(PROJECT), PROJECT), undefined)
  t.equal(store.requests, 1)

  store.handler = answer500
  const strangers = await Promise.all(Array.from({ length: 50 }, async () => await (await createTokenIssuer()).sign(PROJECT)))
  assertUnreachable(t, await oneAfterAnother(v, strangers), '50 unknown kids while the store fails')
  t.equal(store.requests, 2, 'one refetch, then the back-off')
  t.equal(await v.authorize(await issuer.sign(PROJECT), PROJECT), undefined, 'a token of a known key is still accepted')
  t.equal(store.requests, 2)
})

t.test('through the sidecar: 300 forged tokens against a failing JWKS make one fetch, each call a 502', async t => {
  const store = await startStore(t, answer500)
  const app = await startTestServer((_req, res) => { res.writeHead(200).end('{}') })
  const h = await startHarness(app.url, { PROJECT_ID: PROJECT, AUTH_JWKS_URL: store.url.href })
  t.teardown(async () => {
    await h.close()
    await app.close()
  })
  const attacker = await createTokenIssuer()
  const forged = await Promise.all(Array.from({ length: 300 }, async () => await attacker.sign(PROJECT)))
  const started = Date.now()
  const statuses: string[] = []
  const queue = [...forged]
  await Promise.all(Array.from({ length: 10 }, async () => {
    for (let token = queue.shift(); token !== undefined; token = queue.shift()) {
      const r = await send(`${h.base}/v4/${PROJECT}/app/x`, { headers: { authorization: `Bearer ${token}` } })
      statuses.push(`${r.status} ${r.text}`)
    }
  }))
  const elapsed = Date.now() - started
  // one fetch per default 5 s back-off window: one on a quiet machine, one more per window a loaded one needs
  const windows = Math.floor(elapsed / 5_000) + 1
  t.comment(`all answered in ${elapsed} ms: ${windows} back-off window(s)`)
  // the key set is not on STORE_URL's origin: the answer names AUTH_JWKS_URL
  t.same([...new Set(statuses)], [`502 ${JSON.stringify({ message: 'token keys unreachable: AUTH_JWKS_URL could not be fetched' })}`], 'every call: 502 and one body')
  t.equal(statuses.length, 300)
  t.ok(store.requests >= 1 && store.requests <= windows, `one key-set fetch per back-off window for 300 forged tokens (${store.requests})`)
  t.equal(app.requests.length, 0, 'the app saw nothing')
})

/** How a streamed answer ended: sent in full, or cut off by the client after `bodyBytes` bytes. */
interface Sent { complete: boolean, bodyBytes: number }

/** An answer of exactly `total` bytes: `prefix`, 'x' padding, `suffix`; chunked, or with its Content-Length. */
interface Padded { prefix: string, suffix: string, total: number, declared: boolean }

function * paddedParts ({ prefix, suffix, total }: Padded): Generator<Buffer> {
  const pad = Buffer.alloc(64 * 1024, 'x')
  yield Buffer.from(prefix)
  for (let left = total - prefix.length - suffix.length; left > 0; left -= pad.length) yield pad.subarray(0, Math.min(pad.length, left))
  yield Buffer.from(suffix)
}

/** How long a declared over-cap body is held back: time for the client to refuse on the headers alone. */
const HOLD_MS = 500

/**
 * Answers 200 with `padded`, a 64 KiB part at a time as the client takes them (never more than the
 * socket accepts). A declared body larger than `cap` is held back for HOLD_MS (or until the close).
 */
async function streamPadded (res: ServerResponse, padded: Padded, cap: number): Promise<Sent> {
  let closed = false
  const close = new Promise<void>(resolve => res.once('close', () => { closed = true; resolve() }))
  res.writeHead(200, { 'content-type': 'application/json', ...(padded.declared ? { 'content-length': String(padded.total) } : {}) })
  res.flushHeaders()
  if (padded.declared && padded.total > cap) await Promise.race([close, sleep(HOLD_MS)])
  let bodyBytes = 0
  for (const part of paddedParts(padded)) {
    if (closed) break
    bodyBytes += part.length
    if (!res.write(part)) await Promise.race([close, new Promise(resolve => res.once('drain', resolve))])
  }
  if (!closed) res.end()
  await close
  return { complete: res.writableFinished, bodyBytes }
}

/** How the cap was enforced, as the store saw it: a declared body refused on its headers, a huge chunked one cut off. */
function assertCutOff (t: Test, sent: Sent, padded: Padded): void {
  if (padded.declared) {
    t.same(sent, { complete: false, bodyBytes: 0 }, 'refused on its Content-Length: the connection closed before one body byte was sent')
  } else if (padded.total === HUGE) {
    t.equal(sent.complete, false, 'the connection was closed before the store finished')
    t.ok(sent.bodyBytes < HUGE / 2, `cut off: the store had handed over ${sent.bodyBytes} of ${HUGE} bytes`)
  } // a chunked body just past the cap fits in the socket buffers: the store cannot see the cut
}

/** A store that answers `first` (when given) to its first request, then `padded`; `sent` tells how the padded answer ended. */
async function startPaddedStore (t: Test, padded: Padded, cap: number, first?: string): Promise<Store & { sent: Promise<Sent> }> {
  let report: (sent: Sent) => void = () => {}
  const sent = new Promise<Sent>(resolve => { report = resolve })
  const store = await startStore(t, (_req, res) => {
    if (first !== undefined && store.requests === 1) res.writeHead(200, { 'content-type': 'application/json' }).end(first)
    else void streamPadded(res, padded, cap).then(report)
  })
  return Object.assign(store, { sent })
}

/** Far more than the socket buffers on both ends can hold (up to 32 + 4 MiB on Linux): a store sending it all was never cut off. */
const HUGE = 128 * MiB
const SIZES = (cap: number): Array<[string, number]> => [['exactly the cap', cap], ['one byte past the cap', cap + 1], ['128 MiB', HUGE]]

t.test('the JWKS response is capped at 1 MiB; a larger one is a failed fetch', async t => {
  t.equal(JWKS_MAX_BYTES, MiB)
  for (const declared of [false, true]) {
    for (const [size, total] of SIZES(JWKS_MAX_BYTES)) {
      t.test(`${declared ? 'with Content-Length' : 'chunked'}: ${size}`, async t => {
        const issuer = await createTokenIssuer()
        // a valid key set holding the key, padded: only the size can make it refused
        const padded = { prefix: `{"keys":${JSON.stringify(issuer.jwks.keys)},"pad":"`, suffix: '"}', total, declared }
        const store = await startPaddedStore(t, padded, JWKS_MAX_BYTES)
        const v = new TokenVerifier({ jwksUrl: store.url, retryAfterFailureMs: 5_000 })
        const token = await issuer.sign(PROJECT)
        if (total <= JWKS_MAX_BYTES) {
          t.equal(await v.authorize(token, PROJECT), undefined, 'read, and its key used')
          t.same(await store.sent, { complete: true, bodyBytes: total })
          return
        }
        await allUnreachable(t, [v.authorize(token, PROJECT)], 'refused')
        assertCutOff(t, await store.sent, padded)
        await allUnreachable(t, [v.authorize(token, PROJECT)], 'within the back-off')
        t.equal(store.requests, 1, 'it backs off like any failed fetch')
      })
    }
  }
})

t.test(`the revocation list response is capped at ${REVOCATION_LIST_MAX_BYTES} bytes; past it the last list stays in force`, async t => {
  t.equal(REVOCATION_LIST_MAX_BYTES, 4 * MiB)
  for (const declared of [false, true]) {
    for (const [size, total] of SIZES(REVOCATION_LIST_MAX_BYTES)) {
      t.test(`${declared ? 'with Content-Length' : 'chunked'}: ${size}`, async t => {
        const padded = { prefix: '{"revoked":["new"],"pad":"', suffix: '"}', total, declared }
        const store = await startPaddedStore(t, padded, REVOCATION_LIST_MAX_BYTES, '{"revoked":["old"]}')
        const list = new RevocationList({ url: store.url })
        await list.refresh()
        t.equal(list.has('old'), true, 'the first list')
        await list.refresh()
        const accepted = total <= REVOCATION_LIST_MAX_BYTES
        t.equal(list.refreshed, accepted ? 2 : 1, accepted ? 'read' : 'refused')
        t.equal(list.has('new'), accepted)
        t.equal(list.has('old'), !accepted, accepted ? 'the new list replaced the old one' : 'the last list stays in force')
        const sent = await store.sent
        if (accepted) t.same(sent, { complete: true, bodyBytes: total })
        else assertCutOff(t, sent, padded)
      })
    }
  }
})
