import type { Redis } from 'ioredis'
import t from 'tap'
import { verifyWebhook } from '../../../src/webhook/webhook-signature.ts'
import { privateRunStore } from '../../helpers/redis-server.ts'
import { receiverFor, runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// docs/runs.md, "Where runs live": the X-Webhook-Secret is kept in the run store only until the
// delivery ends. Here: the secret leaves Redis as soon as nothing can need it (a run canceled, a
// delivery ended, a run expired), whichever comes first.

const SECRET = `whsec-${process.pid}-must-leave`

/** Every key of the database whose content holds `text` (SCAN, then each key read whole by its type). */
async function keysHolding (redis: Redis, text: string): Promise<string[]> {
  const found: string[] = []
  let cursor = '0'
  do {
    const [next, keys] = await redis.scan(cursor, 'COUNT', 1000)
    cursor = next
    for (const key of keys) {
      const type = await redis.type(key)
      const content = type === 'hash'
        ? JSON.stringify(await redis.hgetall(key))
        : type === 'stream'
          ? JSON.stringify(await redis.xrange(key, '-', '+'))
          : type === 'string'
            ? await redis.get(key) ?? ''
            : type === 'set' ? JSON.stringify(await redis.smembers(key)) : (await redis.dumpBuffer(key))?.toString('latin1') ?? ''
      if (content.includes(text)) found.push(key)
    }
  } while (cursor !== '0')
  return found.sort()
}

t.test('the webhook secret leaves Redis when its run is canceled (queued or running), when its delivery ends, and when the run expires', async t => {
  const { env, probe } = await privateRunStore(t)
  const app = await runsAppFor(t)
  const receiver = await receiverFor(t, [200])
  const h = await runsSidecarFor(t, app.url, {
    ...env, DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', RUN_RETENTION_SECONDS: '2'
  })
  const client = runsClient({ base: h.base })
  const hooked = `?webhookEndpoint=${encodeURIComponent(`${receiver.url}/hook`)}`
  const withSecret = { headers: { 'x-webhook-secret': SECRET } }

  t.equal((await client.submit(`/hold/running${hooked}`, 'running', withSecret)).status, 202)
  await app.waitForHeld(1)
  t.equal((await client.submit(`/json${hooked}`, 'queued', withSecret)).status, 202)
  t.same(await keysHolding(probe, SECRET), ['as:{p/a}:run:queued', 'as:{p/a}:run:running'], 'kept while a delivery may still come')
  t.equal((await client.cancel('queued')).status, 200)
  t.same(await keysHolding(probe, SECRET), ['as:{p/a}:run:running'], 'a queued run canceled: no webhook will be sent, its secret is gone at once')

  t.equal((await client.cancel('running')).status, 200)
  const [canceled] = await receiver.waitForAttempts(1)
  t.match(JSON.parse(canceled?.body.toString() ?? '{}'), { run_id: 'running', status_code: 499 })
  t.ok(verifyWebhook(SECRET, canceled?.headers ?? {}, canceled?.body ?? Buffer.alloc(0)), 'the canceled run\'s webhook is signed with it')
  await client.until('running', record => record.webhook?.status === 'delivered')
  t.same(await keysHolding(probe, SECRET), [], 'a running run canceled: gone once its delivery ended')

  t.equal((await client.submit(`/json${hooked}`, 'finished', withSecret)).status, 202)
  await client.until('finished', record => record.webhook?.status === 'delivered')
  t.equal(receiver.attempts.length, 2)
  t.same(await keysHolding(probe, SECRET), [], 'a finished run: gone once its delivery ended')
  await eventually(async () => (await probe.exists('as:{p/a}:run:finished')) === 0, 5000)
  t.same(await keysHolding(probe, SECRET), [], 'expired: nothing left')
  t.same((await probe.keys('*')).filter(key => key.includes(':run:') || key.includes(':delivery:')), [], 'no run or delivery left once expired')
})
