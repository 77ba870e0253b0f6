import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import t from 'tap'
import { COMMAND_TIMEOUT_MS } from '../../../src/runs/store/redis/redis-replies.ts'
import { metric } from '../../helpers/admin-metrics.ts'
import { send, type SentResponse } from '../../helpers/http-client.ts'
import { privateRunStore, startPrivateRedis } from '../../helpers/redis-server.ts'
import { runsAppFor, runsClient, runsSidecarFor, type RunsClient } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'
import { patient, sleep } from '../../helpers/timing.ts'

// docs/runs.md, "Where runs live": a Redis that is demoted, out of memory or not
// answering within 2 s gives recorded-run requests 503 {"message":"run store unavailable"} with
// Retry-After, never 500 and never a hang; they work again within 10 s of a primary answering,
// without a restart. sidecar_run_store_up and /readyz's body say whether the store answers.

type Tap = Parameters<Parameters<typeof t.test>[0]>[0]

const UNAVAILABLE = '{"message":"run store unavailable"}'

/** How an upper bound of the docs is scaled for a loaded machine, as the assertion says. */
const PATIENCE_NOTE = 'times PATIENCE on a loaded machine'

// each subtest has a private Redis and a sidecar of its own, and mostly waits (on a paused Redis,
// a retry once a second): two at a time
t.jobs = 2

/** `request`'s answer and how long it took, failing (rather than hanging) past 5 s. */
async function timed (request: Promise<SentResponse>): Promise<{ response: SentResponse, ms: number }> {
  const started = performance.now()
  let timer: NodeJS.Timeout | undefined
  const hung = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error('no answer within 5 s')) }, 5000) })
  try {
    return { response: await Promise.race([request, hung]), ms: performance.now() - started }
  } finally {
    clearTimeout(timer)
  }
}

/** Asserts a 503 run-store-unavailable answer, within `withinMs` when told. */
function isUnavailable (t: Tap, { response, ms }: { response: SentResponse, ms: number }, what: string, withinMs?: number): void {
  t.equal(response.status, 503, `${what}: 503 (${response.status} ${response.text})`)
  t.equal(response.text, UNAVAILABLE, `${what}: its body`)
  t.equal(response.headers['retry-after'], '1', `${what}: Retry-After`)
  // the docs' 2 s is the command deadline's (checked below); on the wall clock only a hang is excluded
  if (withinMs !== undefined) t.ok(ms < patient(withinMs), `${what}: answered in ${Math.round(ms)} ms, not a hang`)
}

t.test('the store\'s command deadline is within the docs\' 2 s', async t => {
  t.ok(COMMAND_TIMEOUT_MS < 2000, `${COMMAND_TIMEOUT_MS} ms`)
})

/** The three recorded-run requests: an async submit, a call with an Idempotency-Key, a record read. */
function recordedRuns (client: RunsClient, n: number): Array<[string, () => Promise<SentResponse>]> {
  return [
    ['async submit', async () => await client.submit('/json', `submit-${n}`)],
    ['keyed call', async () => await client.call('/json', { headers: { 'idempotency-key': `key-${n}` } })],
    ['record read', async () => await send(client.runUrl('before'), { headers: client.headers() })]
  ]
}

/** A sidecar (auth off) on a private Redis, with one run `before` submitted and succeeded. */
async function sidecarWithOneRun (t: Tap): Promise<{ store: Awaited<ReturnType<typeof privateRunStore>>, h: Awaited<ReturnType<typeof runsSidecarFor>>, client: RunsClient }> {
  const store = await privateRunStore(t)
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { ...store.env, DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'before')).status, 202)
  t.equal((await client.finished('before')).record.status, 'succeeded')
  return { store, h, client }
}

t.test('a Redis that stops answering: 503 within 2 s, never a hang; sidecar_run_store_up 0, /readyz still 200 and says so; back after SIGCONT', async t => {
  const { store, h, client } = await sidecarWithOneRun(t)
  t.equal(await metric(h, 'sidecar_run_store_up'), 1)
  const ready = await send(`${h.admin}/readyz`)
  t.equal(ready.status, 200)
  t.same(ready.json(), { status: 'ready', run_store: 'up' })

  store.pause()
  t.teardown(() => { store.resume() })
  for (const [what, request] of recordedRuns(client, 1)) isUnavailable(t, await timed(request()), what, 2000)
  t.equal((await timed(client.cancel('before'))).response.status, 503, 'a cancel: 503')
  t.equal((await timed(send(client.runUrl('before', '/events'), { headers: client.headers() }))).response.status, 503, 'an event read: 503')
  const plain = await timed(client.call('/json'))
  t.equal(plain.response.status, 200, 'a plain call is not affected')

  await eventually(async () => await metric(h, 'sidecar_run_store_up') === 0, 5000)
  // a record read asked first waits on the paused store until its 1.5 s deadline: a scrape asked after it
  // (past the deadline timer's 100 ms tick) that waited on the store too could not answer first
  let readAnswered = false
  const read = timed(send(client.runUrl('before'), { headers: client.headers() })).finally(() => { readAnswered = true })
  await sleep(200)
  const scrape = await timed(send(`${h.admin}/metrics`))
  t.equal(scrape.response.status, 200, '/metrics answers while the store does not')
  t.notOk(readAnswered, `/metrics does not wait on the store: it answers before a read asked earlier (${Math.round(scrape.ms)} ms)`)
  isUnavailable(t, await read, 'the read asked before the scrape')
  const readyDown = await send(`${h.admin}/readyz`)
  t.equal(readyDown.status, 200, '/readyz stays about the app')
  t.same(readyDown.json(), { status: 'ready', run_store: 'down' })

  store.resume()
  const back = performance.now()
  await eventually(async () => (await client.submit('/json', 'after')).status === 202, 10_000)
  // docs/runs.md's 10 s on a quiet machine (a 2 s probe); the alternative, never without a restart, outlasts any ceiling
  t.ok(performance.now() - back < patient(10_000), `accepted again within 10 s, ${PATIENCE_NOTE}`)
  t.equal((await client.finished('after')).record.status, 'succeeded', 'and it runs')
  t.equal((await client.call('/json', { headers: { 'idempotency-key': 'key-after' } })).status, 200)
  await eventually(async () => await metric(h, 'sidecar_run_store_up') === 1, 5000)
  t.same((await send(`${h.admin}/readyz`)).json(), { status: 'ready', run_store: 'up' })
})

t.test('a Redis that stops answering: each recorded-run request gets its 503 within 2 s of its own arrival, also behind 10 others waiting', async t => {
  const { store, client } = await sidecarWithOneRun(t)
  store.pause()
  t.teardown(() => { store.resume() })
  // 10 requests, one every 150 ms: each arrives while the commands of those before it still wait
  const answers: Array<Promise<{ response: SentResponse, ms: number }>> = []
  for (let n = 0; n < 10; n++) {
    const [, request] = recordedRuns(client, n)[n % 3] as [string, () => Promise<SentResponse>]
    answers.push(timed(request()))
    await new Promise(resolve => setTimeout(resolve, 150))
  }
  const timings = await Promise.all(answers)
  timings.forEach((answer, n) => { isUnavailable(t, answer, `request ${n + 1}`, 2000) })
})

t.test('a demoted primary (REPLICAOF): 503, never 500, while it is a replica; a primary again (REPLICAOF NO ONE): works within 10 s', async t => {
  const store = await privateRunStore(t)
  // Redis 7 waits repl-diskless-sync-delay (5 s by default) for more replicas before it sends the
  // first its data: the demotion is wanted at once (the wait below once ran out under load)
  const other = await startPrivateRedis(t, ['--repl-diskless-sync-delay', '0'])
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { ...store.env, DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'before')).status, 202)
  await client.finished('before')

  const otherPort = new URL(other.url).port
  await store.probe.config('SET', 'repl-diskless-load', 'swapdb') // nothing written to disk
  await store.probe.replicaof('127.0.0.1', otherPort)
  await eventually(async () => (await store.probe.info('replication')).includes('master_link_status:up'), 5000)
  for (let n = 0; n < 3; n++) {
    const submit = await timed(client.submit('/json', `demoted-${n}`))
    isUnavailable(t, submit, `async submit #${n}`, 2000)
    isUnavailable(t, await timed(client.call('/json', { headers: { 'idempotency-key': `demoted-${n}` } })), `keyed call #${n}`, 2000)
  }
  await eventually(async () => await metric(h, 'sidecar_run_store_up') === 0, 5000)
  t.equal((await send(`${h.admin}/readyz`)).status, 200)

  await store.probe.replicaof('NO', 'ONE')
  const back = performance.now()
  await eventually(async () => (await client.submit('/json', 'after')).status === 202, 10_000)
  // docs/runs.md's 10 s on a quiet machine (a 2 s probe); the alternative, never without a restart, outlasts any ceiling
  t.ok(performance.now() - back < patient(10_000), `accepted again within 10 s, ${PATIENCE_NOTE}, without a restart`)
  t.equal((await client.finished('after')).record.status, 'succeeded', 'and it runs')
  await eventually(async () => await metric(h, 'sidecar_run_store_up') === 1, 5000)
})

t.test('a Redis out of memory (noeviction): a submit gets 503, not 500; once it has room, every accepted run finishes', async t => {
  const store = await privateRunStore(t)
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { ...store.env, DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/hold/running', 'running')).status, 202)
  const held = await app.waitForHeld(1)
  t.equal((await client.submit('/json', 'queued')).status, 202)

  await store.probe.config('SET', 'maxmemory-policy', 'noeviction')
  await store.probe.config('SET', 'maxmemory', String(Math.floor(await store.usedMemory() / 2)))
  isUnavailable(t, await timed(client.submit('/json', 'refused')), 'async submit', 2000)
  isUnavailable(t, await timed(client.call('/json', { headers: { 'idempotency-key': 'refused' } })), 'keyed call', 2000)
  // the running run ends while the store cannot write it; the queued one is taken and cannot start
  await new Promise<void>(resolve => { held.res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}', () => { resolve() }) })
  t.equal((await client.read('running')).record.status, 'running', 'its end is not written yet')
  t.equal((await client.read('queued')).record.status, 'queued')

  await store.probe.config('SET', 'maxmemory', '0')
  const running = await client.finished('running', 10_000)
  t.equal(running.record.status, 'succeeded', 'the run that ended in the outage is finished once the store has room')
  t.same(running.record.result, { ok: true })
  t.equal((await client.finished('queued', 10_000)).record.status, 'succeeded', 'the run that could not start runs')
  t.equal((await client.submit('/json', 'after')).status, 202)
  t.equal((await client.finished('after')).record.status, 'succeeded')
  t.notOk(h.logs.some(line => line.status === 500), 'no call answered 500')
})

t.test('a queue read that fails at once (the queue key holds another type): tried again once a second, not in a loop; runs go on once it is fixed', async t => {
  const store = await privateRunStore(t)
  // another program's key where the app's queue goes: every read of the queue fails WRONGTYPE at once
  await store.probe.set('as:{p/a}:queue', 'not a stream')
  const xgroups = async (): Promise<number> => Number(/cmdstat_xgroup\|create:calls=(\d+)/.exec(await store.probe.info('commandstats'))?.[1] ?? 0)
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { ...store.env, DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  await eventually(async () => await xgroups() > 0, 5000)
  const from = await xgroups()
  const started = performance.now()
  // the sidecar answers meanwhile, promptly (a loop of failed reads would starve it)
  for (let i = 0; i < 4; i++) {
    const answer = await timed(client.call('/json'))
    t.equal(answer.response.status, 200, 'a plain call')
    // a sidecar starved by a loop of failed reads answers late or not at all (5 s: a hang); the count below proves no loop
    t.ok(answer.ms < patient(500), `answered in ${Math.round(answer.ms)} ms`)
    await new Promise(resolve => setTimeout(resolve, 500))
  }
  const tries = await xgroups() - from
  const seconds = (performance.now() - started) / 1000
  t.ok(tries <= Math.ceil(seconds) + 1, `${tries} reads tried in ${seconds.toFixed(1)} s: about one a second`)

  await store.probe.del('as:{p/a}:queue')
  t.equal((await client.submit('/json', 'after-fix')).status, 202)
  t.equal((await client.finished('after-fix')).record.status, 'succeeded', 'the queue works once the key is gone')
})

t.test('an event reader whose Redis stops answering mid-stream: the stream ends with event: error "run store unavailable" after the events sent, never a silent cut; a reader resumes after the last once it answers', async t => {
  const store = await privateRunStore(t)
  const app = await runsAppFor(t)
  const h = await runsSidecarFor(t, app.url, { ...store.env, DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  // 40 events of 1 MiB: more than a socket's buffers hold, so the sidecar reads the store again only as its reader takes them
  const EVENTS = 40
  const line = `"${'e'.repeat(1024 * 1024 - 2)}"`
  t.equal((await client.submit('/ndjson', 'big')).status, 202)
  const held = await app.waitForHeld(1)
  for (let n = 0; n < EVENTS; n++) if (!held.res.write(`${line}\n`)) await once(held.res, 'drain')
  held.res.end()
  t.equal((await client.finished('big')).record.status, 'succeeded')

  const reader = await client.follow('big')
  t.equal(reader.status, 200)
  await reader.waitForEvents(1)
  reader.res.pause() // a reader that stops reading: the sidecar waits for it to drain
  store.pause()
  t.teardown(() => { store.resume() })
  reader.res.resume()
  await reader.done
  const last = reader.events.at(-1)
  t.same({ event: last?.event, data: last?.data }, { event: 'error', data: UNAVAILABLE }, 'the stream ends saying why')
  const sent = reader.events.slice(0, -1)
  t.ok(sent.length > 0 && sent.length < EVENTS, `after some of the events (${sent.length})`)
  t.same(sent.map(e => e.id), sent.map((_e, i) => String(i)), 'in order, from the first')
  t.ok(sent.every(e => e.data === line), 'each whole')

  store.resume()
  const lastId = String(sent.length - 1)
  await eventually(async () => (await send(client.runUrl('big'), { headers: client.headers() })).status === 200, 10_000)
  const rest = await client.follow('big', { headers: { 'last-event-id': lastId } })
  await rest.done
  t.same(rest.events.slice(0, -1).map(e => e.id), Array.from({ length: EVENTS - sent.length }, (_v, i) => String(sent.length + i)), 'a reader from the last event id gets the rest')
  t.equal(rest.events.at(-1)?.event, 'done')
})
