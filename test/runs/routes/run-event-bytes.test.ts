import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import t, { type Test } from 'tap'
import { privateRunStore, type PrivateRunStore } from '../../helpers/redis-server.ts'
import { runsAppFor, runsClient } from '../../helpers/runs-client.ts'
import { startSidecarProcess } from '../../helpers/sidecar-process.ts'

// RUN_MAX_EVENT_BYTES (default 64 MiB): a streamed run's kept events are bounded in bytes, not only
// in number; a reader asking for events no longer kept is told so, then gets the kept ones.

const MIB = 1024 * 1024
const EVENTS = 600
const KEPT = 64 // 64 MiB of 1 MiB events
const HEAP_MIB = 256
/** One NDJSON line: a JSON string of exactly 1 MiB. */
const LINE = Buffer.from(`"${'e'.repeat(MIB - 2)}"\n`)

/** A process's resident memory now and at its peak (/proc/<pid>/status), in bytes. */
function residentOf (pid: number): { rss: number, peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  const kib = (field: string): number => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]) * 1024
  return { rss: kib('VmRSS'), peak: kib('VmHWM') }
}

async function bigStream (t: Test, backend: 'memory' | 'redis'): Promise<void> {
  const app = await runsAppFor(t)
  const redis: PrivateRunStore | undefined = backend === 'redis' ? await privateRunStore(t) : undefined
  const env: Record<string, string> = { DISABLE_AUTH: 'true', ...redis?.env }
  // a heap that could not hold the 600 MiB: the sidecar must not need to (and its garbage is collected before it piles up)
  const sidecar = await startSidecarProcess(t, { ...env, APP_URL: app.url, NODE_OPTIONS: `--max-old-space-size=${HEAP_MIB}` })
  const pid = sidecar.child.process.pid as number
  const client = runsClient({ base: sidecar.base })
  const before = residentOf(pid)
  const usedBefore = await redis?.usedMemory() ?? 0
  t.equal((await client.submit('/ndjson', 'big')).status, 202)
  const held = await app.waitForHeld(1)
  // a sidecar that dies mid-stream (out of heap) never drains the app's writes: that ends the test
  // at once, with what it said, instead of a wait for tap's time-out
  const died = once(sidecar.child.process, 'close').then(([code, signal]) => {
    throw new Error(`the sidecar exited (${String(code ?? signal)}) mid-stream: ${sidecar.child.stderr.slice(0, 2000)}`)
  })
  died.catch(() => {})
  for (let n = 0; n < EVENTS; n++) {
    if (!held.res.write(LINE)) await Promise.race([once(held.res, 'drain'), died])
  }
  held.res.end()
  const { record } = await client.finished('big', 120_000)
  t.equal(record.status, 'succeeded')

  const after = residentOf(pid)
  const grown = (after.rss - before.rss) / MIB
  const peak = (after.peak - before.rss) / MIB
  // with Redis, the events on their way count too: as many bytes again in flight, and as many waiting behind them
  const bounds = redis === undefined ? 64 : 3 * 64
  // RSS is given back to the system when the collector decides (Node 24 later than 20): what is left
  // after the run gets the peak's margin; both stay well below what was streamed (EVENTS MiB)
  const margin = bounds + 64 + 192
  t.ok(margin < EVENTS, 'the bound says something')
  t.ok(grown < margin, `the sidecar's RSS within a margin of what it keeps (${grown.toFixed(1)} MiB more; ${EVENTS} MiB streamed)`)
  t.ok(peak < margin, `and at its peak (${peak.toFixed(1)} MiB more)`)
  if (redis !== undefined) {
    // besides the data: the Lua VM's garbage and the clients' query buffers
    const used = await redis.usedMemory() - usedBefore
    t.ok(used < 64 * MIB + 32 * MIB, `Redis holds the kept events and little more (${(used / MIB).toFixed(1)} MiB more)`)
    t.equal(await redis.probe.xlen('as:{p/a}:events:big'), KEPT)
  }

  const reader = await client.follow('big')
  await reader.done
  t.equal(reader.status, 200, 'the events route answers (a failure says why)')
  const first = EVENTS - KEPT
  t.same(reader.events[0], { event: 'error', id: undefined, data: `{"message":"events before ${first} are no longer kept"}`, at: reader.events[0]?.at },
    'a reader from the first event is told the oldest are no longer kept')
  const ids = reader.events.slice(1, -1).map(e => e.id)
  t.same(ids, Array.from({ length: KEPT }, (_, i) => String(first + i)), 'then the last 64 events, in order')
  t.ok(reader.events.slice(1, -1).every(e => e.data === LINE.subarray(0, -1).toString()), 'each whole')
  t.equal(reader.events.at(-1)?.event, 'done')
}

t.test('memory: a run of 600 events of 1 MiB keeps the last 64 MiB of them (RUN_MAX_EVENT_BYTES); what the sidecar holds stays bounded', async t => {
  await bigStream(t, 'memory')
})

t.test('redis: the same run; the events stream is trimmed by bytes, Redis\'s used_memory stays bounded', async t => {
  await bigStream(t, 'redis')
})
