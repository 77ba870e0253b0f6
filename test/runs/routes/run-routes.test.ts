import t from 'tap'
import { verifyWebhook } from '../../../src/webhook/webhook-signature.ts'
import { metric } from '../../helpers/admin-metrics.ts'
import { send } from '../../helpers/http-client.ts'
import { receiverFor, runsAppFor, runsClient, runsSidecarFor, type RunRecordBody } from '../../helpers/runs-client.ts'
import { patient } from '../../helpers/timing.ts'

const appFor = runsAppFor
const sidecarFor = runsSidecarFor

const NO_SUCH_RUN = '{"message":"no such run"}'

t.test('_runs routes take the call\'s route and auth checks; a run of another project or app is "no such run"', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url)
  const token = await h.token('proj')
  const client = runsClient({ base: h.base, project: 'proj', app: 'app', token })
  t.equal((await client.submit('/json', 'mine')).status, 202)
  t.equal((await client.finished('mine')).record.status, 'succeeded')

  for (const suffix of ['', '/events', '/cancel']) {
    const method = suffix === '/cancel' ? 'POST' : 'GET'
    const url = client.runUrl('mine', suffix)
    const missing = await send(url, { method, headers: { 'x-request-id': 'no-token' } })
    t.equal(missing.status, 401, `${suffix || 'record'}: no token`)
    t.equal(missing.text, '{"message":"missing bearer token"}')
    t.equal(missing.headers['x-request-id'], 'no-token')
    const bad = await send(url, { method, headers: { authorization: 'Bearer not-a-jwt' } })
    t.equal(bad.status, 401, `${suffix || 'record'}: a malformed token`)
    const forbidden = await send(url, { method, headers: { authorization: `Bearer ${await h.token('other')}` } })
    t.equal(forbidden.status, 403, `${suffix || 'record'}: another project's token`)
    t.equal(forbidden.text, '{"message":"token is not valid for this project"}')
    const otherApp = await send(`${h.base}/v4/proj/other-app/_runs/mine${suffix}`, { method, headers: { authorization: `Bearer ${token}` } })
    t.equal(otherApp.status, 404, `${suffix || 'record'}: the same id under another app`)
    t.equal(otherApp.text, NO_SUCH_RUN)
    const otherProject = await send(`${h.base}/v4/other/app/_runs/mine${suffix}`, { method, headers: { authorization: `Bearer ${await h.token('other')}` } })
    t.equal(otherProject.status, 404, `${suffix || 'record'}: the same id under another project, with its own token`)
    t.equal(otherProject.text, NO_SUCH_RUN)
    const unknown = await send(client.runUrl('never-recorded', suffix), { method, headers: { authorization: `Bearer ${token}`, 'x-request-id': 'asks' } })
    t.equal(unknown.status, 404, `${suffix || 'record'}: a run never recorded`)
    t.equal(unknown.text, NO_SUCH_RUN)
    t.equal(unknown.headers['x-request-id'], 'asks')
  }
  t.same(app.requests.map(r => r.url), ['/json'], '_runs never reaches the app')
})

t.test('PROJECT_ID and APP_NAME: _runs of another app is the route\'s 404, before auth', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { PROJECT_ID: 'proj', APP_NAME: 'app' })
  const client = runsClient({ base: h.base, project: 'proj', app: 'app', token: await h.token('proj') })
  await client.submit('/json', 'served')
  t.equal((await client.finished('served')).record.status, 'succeeded')
  const elsewhere = await send(`${h.base}/v4/proj/other-app/_runs/served`)
  t.equal(elsewhere.status, 404)
  t.equal(elsewhere.text, '{"message":"no such app"}')
  t.equal((await send(client.runUrl('served'))).status, 401)
})

t.test('route shapes: malformed run id 400, other shapes 404, a wrong method 405 with Allow; none reach the app', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'shape')).status, 202)
  const record = (await client.finished('shape')).response.text
  const malformed = '{"message":"malformed run id: run ids match [A-Za-z0-9_-]{1,128}"}'
  for (const id of ['bad.id', 'a%2Fb', 'x'.repeat(129), 'caf%C3%A9', 'a+b']) {
    for (const suffix of ['', '/events', '/cancel']) {
      const r = await send(client.runUrl(id, suffix), { method: suffix === '/cancel' ? 'POST' : 'GET', headers: { 'x-request-id': 'shape-check' } })
      t.equal(r.status, 400, `${id}${suffix}`)
      t.equal(r.text, malformed)
      t.equal(r.headers['x-request-id'], 'shape-check')
    }
  }
  t.equal((await send(client.runUrl('x'.repeat(128)))).text, NO_SUCH_RUN, 'an id of 128 characters is well formed')
  // every app path starting with `_` is reserved: the sidecar's, 404 unless one of its routes
  for (const path of ['/_runs/shape/', '/_runs/shape/other', '/_runs/shape/events/more', '/_runs/shape/cancel/x',
    '/_', '/_/x', '/_other', '/_runsx', '/_health?async=true']) {
    const r = await send(`${h.base}${client.prefix}${path}`)
    t.equal(r.status, 404, path)
    t.equal(r.text, '{"message":"no such route"}')
  }
  const methods = [['', 'GET, HEAD', ['POST', 'PUT', 'DELETE', 'PATCH']], ['/events', 'GET', ['POST', 'HEAD', 'DELETE']], ['/cancel', 'POST', ['GET', 'PUT', 'DELETE']]] as const
  for (const [suffix, allow, refused] of methods) {
    for (const method of refused) {
      for (const id of ['shape', 'unknown-run']) {
        const r = await send(client.runUrl(id, suffix), { method })
        t.equal(r.status, 405, `${method} ${suffix || 'record'} of ${id}`)
        t.equal(r.headers.allow, allow)
        if (method !== 'HEAD') t.equal(r.text, '{"message":"method not allowed"}')
      }
    }
  }
  const head = await send(client.runUrl('shape'), { method: 'HEAD' })
  t.equal(head.status, 200)
  t.equal(head.text, '', 'HEAD: no body')
  t.equal(head.headers['content-length'], String(Buffer.byteLength(record)))
  t.equal(head.headers['content-type'], 'application/json; charset=utf-8')
  t.equal((await send(client.runUrl('shape'))).text, record, 'the record did not change')
  // the reserved path with async=true or Prefer: respond-async is still the sidecar's
  t.equal((await send(`${client.runUrl('shape')}?async=true`)).text, record)
  t.equal((await send(client.runUrl('shape'), { headers: { prefer: 'respond-async' } })).text, record)
  t.equal((await send(`${h.base}${client.prefix}/json/_runs`)).status, 200, 'an underscore further on is the app\'s')
  t.same(app.requests.map(r => r.url), ['/json', '/json/_runs'], 'only the submitted run and the app\'s own path reached the app')
})

t.test('reserved paths are read as they decode and normalise to: %5F, %5f and empty segments', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/json', 'spelled')).status, 202)
  const record = (await client.finished('spelled')).response.text
  const at = (path: string): string => `${h.base}${client.prefix}${path}`
  // _runs routes, however spelled
  for (const path of ['/%5Fruns/spelled', '/%5fruns/spelled', '//_runs/spelled', '///%5Fruns//spelled', '/_runs//spelled']) {
    const r = await send(at(path))
    t.equal(r.status, 200, path)
    t.equal(r.text, record, `${path}: the run's record`)
  }
  t.equal((await send(at('/%5Fruns/%5Fnone'))).text, NO_SUCH_RUN, 'an escaped _ in the run id decodes too: run "_none"')
  const events = await send(at('//%5fruns/spelled//events'))
  t.equal(events.status, 200)
  t.match(events.text, /event: done\n/, 'the events route, so spelled')
  const cancel = await send(at('/%5Fruns/spelled/cancel'), { method: 'POST' })
  t.equal(cancel.status, 409, 'the cancel route, so spelled')
  t.equal(cancel.text, '{"message":"run already finished"}')
  // any other reserved path is 404, and none reaches the app
  for (const path of ['/%5Fsecret', '/%5fsecret/x', '//_secret', '//%5Fsecret?async=true', '/%5F', '/%5F%5Fruns/spelled', '/%5Frunsx/spelled']) {
    const r = await send(at(path), { method: 'POST' })
    t.equal(r.status, 404, path)
    t.equal(r.text, '{"message":"no such route"}', path)
  }
  // only %5F, %5f and empty segments are read: other escapes, and the app's own paths, reach it as sent
  for (const path of ['/%255Fsecret', '/%5Ajson', '/json/%5Fx', '//json', '/json//_x', '/.%5Fx']) {
    t.not((await send(at(path))).text, '{"message":"no such route"}', `${path}: the app's answer`)
  }
  t.same(app.requests.map(r => r.url), ['/json', '/%255Fsecret', '/%5Ajson', '/json/%5Fx', '//json', '/json//_x', '/.%5Fx'],
    'nothing reserved reached the app; the rest went byte for byte')
})

t.test('cancel a queued run: canceled, never reaches the app, no webhook', async t => {
  const app = await appFor(t)
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base })
  const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
  await client.submit('/hold/first', 'first')
  const first = await app.waitForHeld(1)
  await client.submit(`/json/queued?${hook}`, 'queued', { headers: { 'x-webhook-secret': 'queued-secret' } })
  const before = Date.now()
  const canceled = await client.cancel('queued')
  t.equal(canceled.status, 200)
  t.equal(canceled.headers['content-type'], 'application/json; charset=utf-8')
  const record = canceled.json() as RunRecordBody
  t.same(Object.keys(record), ['run_id', 'status', 'created_at', 'completed_at', 'error', 'webhook'], 'no started_at, run_time_ms, status_code or result')
  t.equal(record.status, 'canceled')
  t.same(record.error, { message: 'run canceled' })
  t.same(record.webhook, { status: 'pending', attempts: 0 })
  t.ok(Date.parse(record.completed_at as string) >= before - 1)
  t.equal((await client.read('queued')).response.text, canceled.text, 'the record reads the same afterwards')
  const events = await client.follow('queued')
  await events.done
  t.same(events.events.map(e => [e.event, e.data]), [['done', canceled.text]], 'its events: only done')

  const again = await client.cancel('queued')
  t.equal(again.status, 409)
  t.equal(again.text, '{"message":"run already finished"}')

  // the slot frees: the run behind the canceled one runs, and its webhook is the only one
  await client.submit(`/json/after?${hook}`, 'after')
  first.res.writeHead(200).end('{}')
  await receiver.waitForAttempts(1)
  t.equal((await client.finished('after')).record.status, 'succeeded')
  t.same(app.requests.map(r => r.url), ['/hold/first', '/json/after'], 'the canceled run never reached the app')
  t.same(receiver.attempts.map(a => a.headers['x-request-id']), ['after'], 'no webhook for the canceled run')
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'canceled' }), 1)
})

t.test('cancel a running run: the app request is cut within 1 s, the record canceled, events end with done, the webhook says 499', async t => {
  const app = await appFor(t)
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base })
  const secret = 'cancel-secret-8c2e'
  await client.submit(`/ndjson/run?webhookEndpoint=${encodeURIComponent(receiver.url)}`, 'running', { headers: { 'x-webhook-secret': secret } })
  const held = await app.waitForHeld(1)
  held.res.write('{"step":1}\n')
  const reader = await client.follow('running')
  await reader.waitForEvents(1)
  const runningRecord = (await client.read('running')).record

  const canceledAt = performance.now()
  const canceled = await client.cancel('running')
  t.equal(canceled.status, 200)
  const record = canceled.json() as RunRecordBody
  t.same(Object.keys(record), ['run_id', 'status', 'created_at', 'started_at', 'completed_at', 'queue_time_ms', 'run_time_ms', 'status_code', 'result', 'error', 'webhook'])
  t.equal(record.status, 'canceled')
  t.equal(record.status_code, 499)
  t.same(record.result, { message: 'run canceled' })
  t.same(record.error, { message: 'run canceled' })
  t.equal(record.started_at, runningRecord.started_at)
  const cutAt = await held.cut
  // the app holds the request forever: only the cancel ends it, so a scaled bound excludes a hang
  t.ok(cutAt - canceledAt < patient(1000), `the app request was aborted as the cancel came (${Math.round(cutAt - canceledAt)} ms)`)

  await reader.done
  t.same(reader.events.map(e => [e.id, e.event]), [['0', undefined], ['running.done', 'done']], 'the events end with done')
  const done = reader.events[1]
  t.equal(JSON.parse(done?.data ?? '{}').status, 'canceled')

  const [delivery] = await receiver.waitForAttempts(1)
  const body = JSON.parse(delivery?.body.toString() ?? '{}') as Record<string, unknown>
  t.same(Object.keys(body), ['run_id', 'status_code', 'result', 'run_time_ms', 'timestamp'])
  t.same([body.run_id, body.status_code, body.result], ['running', 499, { message: 'run canceled' }])
  t.ok(verifyWebhook(secret, delivery?.headers ?? {}, delivery?.body ?? ''))
  const final = await client.until('running', r => r.webhook?.status === 'delivered')
  t.same(final.webhook, { status: 'delivered', attempts: 1 })
  t.equal(final.status, 'canceled', 'the cancel stays, whatever the app request did as it was cut')
  t.equal(final.status_code, 499)
  t.same(final.result, { message: 'run canceled' })
  t.equal(receiver.attempts.length, 1)
  t.notOk(JSON.stringify(h.logs).includes(secret))
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'canceled' }), 1, 'counted once')

  const finishedCancel = await client.cancel('running')
  t.equal(finishedCancel.status, 409)
  t.equal(finishedCancel.text, '{"message":"run already finished"}')
})

t.test('cancel: a finished run is 409, an unknown run 404, and the record is unchanged', async t => {
  const app = await appFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true' })
  const client = runsClient({ base: h.base })
  await client.submit('/json', 'done-run')
  await client.submit('/status/500', 'failed-run')
  for (const runId of ['done-run', 'failed-run']) {
    const before = (await client.finished(runId)).response.text
    const r = await client.cancel(runId)
    t.equal(r.status, 409, runId)
    t.equal(r.text, '{"message":"run already finished"}')
    t.equal((await client.read(runId)).response.text, before)
  }
  const unknown = await client.cancel('no-such')
  t.equal(unknown.status, 404)
  t.equal(unknown.text, NO_SUCH_RUN)
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'succeeded' }), 1)
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'failed' }), 1)
})

t.test('cancel a run taken from the queue while it waits for a slot: it never starts, and is counted once', async t => {
  const app = await appFor(t)
  const receiver = await receiverFor(t)
  const h = await sidecarFor(t, app.url, { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8' })
  const client = runsClient({ base: h.base })
  // after a first run the runner waits for the next one with the slot free; a sync call then takes the slot
  await client.submit('/json/warm', 'warm-up')
  t.equal((await client.finished('warm-up')).record.status, 'succeeded')
  const blocker = client.call('/hold/sync', { method: 'GET' })
  const held = await app.waitForHeld(1)
  await client.submit(`/json/never?webhookEndpoint=${encodeURIComponent(receiver.url)}`, 'taken-then-canceled')
  t.equal((await client.read('taken-then-canceled')).record.status, 'queued')
  const canceled = await client.cancel('taken-then-canceled')
  t.equal(canceled.status, 200)
  t.equal((canceled.json() as RunRecordBody).status, 'canceled')
  held.res.writeHead(200).end('{}')
  t.equal((await blocker).status, 200)
  // a run submitted after it runs once the slot is free: by then the canceled one had its chance
  await client.submit('/json/after', 'after-cancel')
  t.equal((await client.finished('after-cancel')).record.status, 'succeeded')
  t.same(app.requests.map(r => r.url), ['/json/warm', '/hold/sync', '/json/after'], 'the canceled run never reached the app')
  t.equal((await client.read('taken-then-canceled')).response.text, canceled.text, 'its record is as the cancel left it')
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'canceled' }), 1)
  t.equal(await metric(h, 'sidecar_runs_total', { status: 'succeeded' }), 2)
  t.equal(receiver.connections(), 0, 'no webhook')
})
