import { performance } from 'node:perf_hooks'
import t from 'tap'
import { runsSetup, type RunsSetup } from '../../helpers/runs-setup.ts'
import { patient } from '../../helpers/timing.ts'

// docs/controlling-work.md, "Time limits": Cancel-After per call (queue included),
// ASYNC_QUEUE_TTL_SECONDS for queued async runs

/** Holds the one slot (REPLICA_CONCURRENCY=1) with a sync call the app keeps: the async runs behind it wait in the queue. */
async function holdSlot (s: RunsSetup): Promise<{ free: () => void }> {
  const call = s.client.call('/hold/slot', { headers: { 'x-request-id': 'slot' } })
  const held = await s.app.waitForHeld(1)
  return { free: () => { held.res.writeHead(200, { 'content-type': 'application/json' }).end('{}'); void call } }
}

t.test('Cancel-After: malformed values are 400 before anything is read or run; valid forms pass', async t => {
  const s = await runsSetup(t, 'memory')
  const malformed = ['', 'abc', '0', '0s', '1.5', '2d', '-1', '1 s', '31536001', '525601m', 'h', '9999999999']
  for (const value of malformed) {
    const answer = await s.client.call('/json/x', { headers: { 'cancel-after': value } })
    // an empty header is still a header: it says nothing a limit can be read from
    t.equal(answer.status, 400, `Cancel-After: '${value}'`)
    t.equal(answer.text, '{"message":"malformed Cancel-After: a whole number of seconds (or <n>s, <n>m, <n>h), 1 s to one year"}')
  }
  t.equal(s.app.requests.length, 0, 'none reached the app')
  const async = await s.client.submit('/json/x', 'bad-async', { headers: { 'cancel-after': '1d' } })
  t.equal(async.status, 400, 'an async call too: nothing recorded')
  t.equal((await s.client.call('/_runs/bad-async', { method: 'GET' })).status, 404)
  for (const value of ['1', '1s', '2m', '1h', '31536000', '525600m', '8760h', ' 5 ']) {
    t.equal((await s.client.call('/json/x', { headers: { 'cancel-after': value } })).status, 200, `Cancel-After: '${value}'`)
  }
})

for (const backend of ['memory', 'redis'] as const) {
  t.test(`${backend}: a sync call past its Cancel-After is answered 504 and its app request cut; the smaller of it and DEADLINE_SECONDS applies`, async t => {
    const s = await runsSetup(t, backend, { DEADLINE_SECONDS: '30' })
    const started = performance.now()
    const call = s.client.call('/hold/sync', { headers: { 'cancel-after': '1' } })
    const held = await s.app.waitForHeld(1)
    const answer = await call
    const took = performance.now() - started
    t.equal(answer.status, 504)
    t.equal(answer.text, '{"message":"request exceeded its deadline of 1s"}')
    t.ok(took >= 950, `answered after ${took.toFixed(0)} ms, counted from its arrival`)
    // DEADLINE_SECONDS (30 s) is far past the scaled bound: the 1 s Cancel-After cut it
    t.ok(took < patient(2500), `answered after ${took.toFixed(0)} ms, at its Cancel-After, not DEADLINE_SECONDS`)
    await held.cut
    t.ok(held.wasCut(), 'the app request was cut')

    const longer = await s.client.call('/json/x', { headers: { 'cancel-after': '1h' } })
    t.equal(longer.status, 200, 'a longer Cancel-After than DEADLINE_SECONDS: DEADLINE_SECONDS applies (and was not reached)')
  })

  t.test(`${backend}: an async run whose Cancel-After passes while queued fails 504 "deadline passed" within 1 s, never reaches the app, and its webhook says so`, async t => {
    const s = await runsSetup(t, backend, { REPLICA_CONCURRENCY: '1' })
    const slot = await holdSlot(s)
    const submittedAt = Date.now()
    const submitted = await s.client.submit(`/json/queued?${s.hook}`, 'late', { headers: { 'cancel-after': '1s' } })
    t.equal(submitted.status, 202)
    t.equal((await s.client.read('late')).record.status, 'queued')
    const [attempt] = await s.receiver.waitForAttempts(1, 5000)
    const failedAt = Date.now()
    t.ok(failedAt - submittedAt >= 1000, `failed ${failedAt - submittedAt} ms after its submission, not before its Cancel-After`)
    // the slot frees only below; the store's idle look (every RUN_LOST_AFTER_SECONDS, 30 s) is far past the scaled bound
    t.ok(failedAt - submittedAt < patient(2500), `failed ${failedAt - submittedAt} ms after its submission, the slot still busy, on its own timer`)
    // its delivery's end is recorded as the receiver answers it
    const record = await s.client.until('late', r => r.webhook?.status === 'delivered')
    const { response } = await s.client.read('late')
    t.equal(record.status, 'failed')
    t.equal(record.status_code, 504)
    t.same(record.error, { message: 'deadline passed' })
    t.same(record.result, { message: 'deadline passed' })
    t.equal(record.started_at, undefined, 'it never started')
    t.equal(record.queue_time_ms, undefined)
    t.match(response.text, /^\{"run_id":"late","status":"failed","created_at":"[^"]+","completed_at":"[^"]+","status_code":504,"result":\{"message":"deadline passed"\},"error":\{"message":"deadline passed"\},"webhook":\{"status":"delivered","attempts":1\}\}$/)
    const body = JSON.parse(attempt?.body.toString() as string) as Record<string, unknown>
    t.equal(body.run_id, 'late')
    t.equal(body.status_code, 504)
    t.same(body.result, { message: 'deadline passed' })
    t.equal(attempt?.headers['x-request-id'], 'late')

    // the slot frees: the next run goes to the app, the expired one never does
    slot.free()
    t.equal((await s.client.submit('/json/next', 'next')).status, 202)
    t.equal((await s.client.finished('next')).record.status, 'succeeded')
    t.same(s.app.requestsTo('/json/queued'), [], 'the expired run never reached the app')
    t.equal((await s.client.cancel('late')).status, 409, 'it has ended: a cancel is too late')
    if (s.due !== undefined) t.same((await s.due()).filter(member => !member.includes(':')), [], 'no queued run left in the due set (a sidecar\'s lease may be)')
  })

  t.test(`${backend}: an async run whose Cancel-After passes while it runs: its app request is cut, 504 "deadline passed"`, async t => {
    const s = await runsSetup(t, backend)
    t.equal((await s.client.submit(`/hold/running?${s.hook}`, 'running', { headers: { 'cancel-after': '1' } })).status, 202)
    const held = await s.app.waitForHeld(1)
    t.equal(held.req.headers['cancel-after'], '1', 'the app sees the limit it runs under')
    await held.cut
    const { record } = await s.client.finished('running')
    t.equal(record.status, 'failed')
    t.equal(record.status_code, 504)
    t.same(record.error, { message: 'deadline passed' })
    t.same(record.result, { message: 'deadline passed' })
    t.type(record.started_at, 'string', 'it had started')
    const [attempt] = await s.receiver.waitForAttempts(1)
    t.equal((JSON.parse(attempt?.body.toString() as string) as { status_code: number }).status_code, 504)
  })

  t.test(`${backend}: ASYNC_QUEUE_TTL_SECONDS fails a run still queued "expired in the queue", with its webhook; a later Cancel-After does not save it`, async t => {
    const s = await runsSetup(t, backend, { REPLICA_CONCURRENCY: '1', ASYNC_QUEUE_TTL_SECONDS: '1' })
    const slot = await holdSlot(s)
    const submittedAt = Date.now()
    t.equal((await s.client.submit(`/json/stale?${s.hook}`, 'stale', { headers: { 'cancel-after': '1h' } })).status, 202)
    const [attempt] = await s.receiver.waitForAttempts(1, 5000)
    // the slot frees only below; the store's idle look (every RUN_LOST_AFTER_SECONDS, 30 s) is far past the scaled bound
    t.ok(Date.now() - submittedAt < patient(2500), 'at its time-to-live, on its own timer, the slot still busy')
    const { record } = await s.client.read('stale')
    t.equal(record.status, 'failed')
    t.equal(record.status_code, 504)
    t.same(record.error, { message: 'expired in the queue' })
    t.same(record.result, { message: 'expired in the queue' })
    t.same((JSON.parse(attempt?.body.toString() as string) as { result: unknown }).result, { message: 'expired in the queue' })
    slot.free()
    t.equal((await s.client.submit('/json/fresh', 'fresh')).status, 202)
    t.equal((await s.client.finished('fresh')).record.status, 'succeeded', 'a run taken at once is within its time-to-live')
    t.same(s.app.requestsTo('/json/stale'), [], 'the expired run never reached the app')
  })
}
