import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import t, { type Test } from 'tap'
import { send } from '../../helpers/http-client.ts'
import { privateRunStore, type PrivateRunStore } from '../../helpers/redis-server.ts'
import { runsAppFor, runsClient, runsSidecarFor } from '../../helpers/runs-client.ts'
import { eventually } from '../../helpers/sidecar-harness.ts'

// ASYNC_QUEUE_MAX_BYTES: the request bodies of async runs waiting for an app are bounded in bytes
// (with ASYNC_QUEUE_DEPTH), in the sidecar's memory and in Redis alike.

setFlagsFromString('--expose-gc')
const gc = runInNewContext('gc') as () => void

const MIB = 1024 * 1024
const BOUND = 32 * MIB
const BODY = Buffer.alloc(8 * MIB, 'b')
const FLOOD = 40

/** What this process holds outside the JS heap (Buffers), once garbage is collected. */
function heldBuffers (): number {
  gc()
  return process.memoryUsage().arrayBuffers
}

async function flood (t: Test, backend: 'memory' | 'redis'): Promise<void> {
  const app = await runsAppFor(t)
  const env: Record<string, string> = { DISABLE_AUTH: 'true', REPLICA_CONCURRENCY: '1', ASYNC_QUEUE_MAX_BYTES: String(BOUND) }
  const redis: PrivateRunStore | undefined = backend === 'redis' ? await privateRunStore(t) : undefined
  const h = await runsSidecarFor(t, app.url, { ...env, ...redis?.env })
  const client = runsClient({ base: h.base })
  t.equal((await client.submit('/hold/slow', 'slow', { body: BODY })).status, 202)
  const slow = await app.waitForHeld(1) // the app is slow: every other run waits
  const buffersBefore = heldBuffers()
  const rssBefore = process.memoryUsage().rss // after heldBuffers()'s collection
  const usedBefore = await redis?.usedMemory() ?? 0

  const answers: string[] = []
  for (let i = 0; i < FLOOD; i++) {
    const answer = await client.submit('/json', `flood-${i}`, { body: BODY })
    answers.push(`${answer.status} ${answer.headers['retry-after'] ?? '-'} ${answer.text}`)
  }
  const refused = '503 1 {"message":"too many async runs waiting"}'
  t.same(answers.map(answer => answer.startsWith('202 ') ? 202 : answer), [...Array<number>(4).fill(202), ...Array<string>(FLOOD - 4).fill(refused)],
    'four 8 MiB bodies fill 32 MiB: the rest are refused, with Retry-After')
  t.equal((await send(client.runUrl('flood-4'))).status, 404, 'a refused run is not recorded')
  t.equal(await h.sidecar.runs.queue.queuedCount(), 4)

  // the refused bodies are garbage by now: collected first. RSS is a loose check (the exact one is
  // the held Buffers below): on Node 24 it grew 83–174 MiB over runs of this same flood, the heap's
  // and the allocator's own growth; holding the flood would be 320 MiB and more
  gc()
  const rss = process.memoryUsage().rss - rssBefore
  t.ok(rss < BOUND + 192 * MIB, `RSS within a margin of the bound (${(rss / MIB).toFixed(1)} MiB more; ${FLOOD * 8} MiB were sent)`)
  if (redis === undefined) {
    // the last refused bodies go once their connections are released
    let grown = Infinity
    await eventually(() => (grown = heldBuffers() - buffersBefore) < BOUND + MIB, 3000).catch(() => {})
    t.ok(grown < BOUND + MIB, `the sidecar holds the bound of waiting bodies and no more (${(grown / MIB).toFixed(1)} MiB more)`)
  } else {
    // besides the data: the Lua VM's garbage and the clients' query buffers, a few MiB, for a
    // while (an idle client's query buffer is shrunk after 2 s: under load one refused body's
    // buffer was still there, 50.2 MiB in all); bodies kept past the bound would stay
    let used = Infinity
    await eventually(async () => (used = await redis.usedMemory() - usedBefore) < BOUND + 16 * MIB, 5000).catch(() => {})
    t.ok(used < BOUND + 16 * MIB, `Redis holds at most the bound of waiting bodies (${(used / MIB).toFixed(1)} MiB more)`)
  }

  const huge = await client.submit('/json', 'huge', { body: Buffer.alloc(BOUND + 1) })
  t.equal(huge.status, 413, 'one body larger than the bound itself')
  t.equal(huge.text, `{"message":"request body exceeds ${BOUND} bytes"}`)
  t.equal((await send(client.runUrl('huge'))).status, 404, 'refused before anything was recorded')
  const chunked = await client.submit('/json', 'huge-chunked', { body: [Buffer.alloc(BOUND), Buffer.alloc(1)] })
  t.equal(chunked.status, 413, 'the same without a Content-Length')
  t.equal((await send(client.runUrl('huge-chunked'))).status, 404)

  slow.res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
  await client.until('flood-0', record => record.status !== 'queued', 10_000)
  t.equal((await client.submit('/json', 'after-start', { body: BODY })).status, 202, 'a started run gives its bytes back: room again')
  t.equal((await client.finished('after-start', 20_000)).record.status, 'succeeded')
}

t.test('memory: a flood of 8 MiB async bodies while the app is slow is refused past ASYNC_QUEUE_MAX_BYTES (503, Retry-After), a larger body alone 413; what is held stays bounded', async t => {
  await flood(t, 'memory')
})

t.test('redis: the same flood; Redis\'s used_memory stays bounded', async t => {
  await flood(t, 'redis')
})
