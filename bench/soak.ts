import { mkdtempSync, readdirSync, readlinkSync, writeFileSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { createParser } from 'eventsource-parser'
import WebSocket from 'ws'
import { createTokenIssuer, serveJwks } from '../test/helpers/demo-token-issuer.ts'
import { LiveHeapProbe } from './live-heap.ts'
import { rssMb } from './process-memory.ts'
import { freePort, guardAgainstOrphans, killAllChildren, spawnChild, waitForHttp200 } from './child-processes.ts'
import { post, ROOT, soakFleet, startFlakyReceiver } from './soak-fleet.ts'
import { soakInterruptible } from './soak-interruptible.ts'

/**
 * `npm run soak` (`SOAK_CASE=fleet`: bench/soak-fleet.ts; `SOAK_CASE=interruptible`:
 * bench/soak-interruptible.ts): SOAK_SECONDS (default 600) of mixed
 * traffic through a sidecar process: plain calls (a third with a webhook to a flaky receiver),
 * NDJSON streams turned into SSE, and WebSockets. Its RSS, fds and sockets are sampled every second,
 * its live heap every LIVE_HEAP_EVERY_S. Fails (exit 1) when memory keeps growing, sockets leak, a
 * call fails, or a webhook is lost or delivered more often than the retry table allows.
 *
 * RSS and the heap in use swing by tens of MB without a leak (V8 moves its heap limit lazily);
 * what a leak raises is the live heap, left after a full collection forced through the inspector
 * (bench/live-heap.ts). The verdict compares the last quarter's live heap with the second
 * quarter's, and RSS only for runaway growth.
 */
const SECONDS = Number(process.env.SOAK_SECONDS ?? 600)
const CONCURRENCY = Number(process.env.SOAK_CONCURRENCY ?? 16)
const ATTEMPTS = 3

/** Every 20 s, or often enough for 8 readings in a shorter run (else its quarters hold none to compare). */
const LIVE_HEAP_EVERY_S = Math.max(1, Math.min(20, SECONDS / 8))

interface Sample { t: number, rssMb: number, fds: number, sockets: number }
interface LiveHeap { t: number, mb: number }

function procStats (pid: number): Omit<Sample, 't'> {
  const fds = readdirSync(`/proc/${pid}/fd`)
  const socket = (fd: string): boolean => { try { return readlinkSync(`/proc/${pid}/fd/${fd}`).startsWith('socket:') } catch { return false } }
  return { rssMb: rssMb(pid) ?? 0, fds: fds.length, sockets: fds.filter(socket).length }
}

function stream (url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    let events = 0
    const parser = createParser({ onEvent: () => { events++ } })
    const req = request(url, { method: 'POST', headers: { ...headers, accept: 'text/event-stream' } }, res => {
      res.setEncoding('utf8')
      res.on('data', (text: string) => { parser.feed(text) })
      res.on('end', () => { resolve(events) })
    })
    req.on('error', reject)
    req.end('{"prompt":"soak tests keep going","delay_ms":5}')
  })
}

function echo (url: string, token: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } })
    ws.on('open', () => { ws.send('ping') })
    ws.on('message', data => {
      if (String(data) !== 'ping') reject(new Error(`echo got ${String(data)}`))
      ws.close(1000)
    })
    ws.on('close', () => { resolve() })
    ws.on('error', reject)
  })
}

async function main (): Promise<number> {
  guardAgainstOrphans(() => {})
  const logDir = mkdtempSync(join(tmpdir(), 'app-sidecar-soak-'))
  const issuer = await createTokenIssuer()
  const jwks = await serveJwks([issuer])
  // 404 (retry), a reset connection (retry) or 200, at random
  const receiver = await startFlakyReceiver(() => { const roll = Math.random(); return roll < 0.25 ? 404 : roll < 0.3 ? 'reset' : 200 })
  const appPort = await freePort()
  const port = await freePort()
  const adminPort = await freePort()
  const inspectPort = await freePort()
  const app = spawnChild({ name: 'app', command: process.execPath, args: ['dist/demo/example-app.js'], env: { PORT: String(appPort) }, cwd: ROOT, logDir })
  const sidecar = spawnChild({
    name: 'sidecar',
    command: process.execPath,
    args: [`--inspect=127.0.0.1:${inspectPort}`, 'dist/bin/app-sidecar.js'],
    env: {
      PORT: String(port), ADMIN_PORT: String(adminPort), HOST: '127.0.0.1', APP_URL: `http://127.0.0.1:${appPort}`,
      STORE_URL: jwks.url.origin, AUTH_JWKS_URL: jwks.url.href, LOG_LEVEL: 'warn', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8',
      WEBHOOK_ATTEMPTS: String(ATTEMPTS), WEBHOOK_MAX_DELAY_MS: '100', WEBHOOK_TIMEOUT_MS: '2000'
    },
    cwd: ROOT,
    logDir
  })
  await waitForHttp200(sidecar, `http://127.0.0.1:${adminPort}/readyz`)
  const token = await issuer.sign('soak', { ttlSeconds: SECONDS + 3600 })
  const auth = { authorization: `Bearer ${token}` }
  const base = `http://127.0.0.1:${port}/v4/soak/app`
  const baseline = procStats(sidecar.pid)
  const probe = await LiveHeapProbe.connect(inspectPort)

  const samples: Sample[] = []
  const counts = { plain: 0, webhooks: 0, streams: 0, websockets: 0, failures: 0 }
  const failures: string[] = []
  const started = Date.now()
  const liveHeap: LiveHeap[] = []
  const elapsed = (): number => (Date.now() - started) / 1000
  const readLiveHeap = async (): Promise<void> => { liveHeap.push({ t: elapsed(), mb: await probe.liveHeapMb() }) }
  const sampler = setInterval(() => { samples.push({ t: elapsed(), ...procStats(sidecar.pid) }) }, 1000)
  const heapSampler = setInterval(() => { readLiveHeap().catch(() => {}) }, LIVE_HEAP_EVERY_S * 1000)
  let seq = 0
  const worker = async (): Promise<void> => {
    while (Date.now() - started < SECONDS * 1000) {
      const kind = seq++ % 10
      try {
        if (kind < 5) {
          const withHook = kind % 3 === 0
          const runId = `soak-${seq}`
          const url = `${base}/run${withHook ? `?webhookEndpoint=${encodeURIComponent(receiver.url)}` : ''}`
          const { status } = await post(url, { ...auth, 'x-request-id': runId }, '{"name":"soak"}')
          if (status !== 200) throw new Error(`plain call ${status}`)
          counts.plain++
          if (withHook) counts.webhooks++
        } else if (kind < 8) {
          const events = await stream(`${base}/generate`, auth)
          if (events !== 4) throw new Error(`stream gave ${events} events`)
          counts.streams++
        } else {
          await echo(`ws://127.0.0.1:${port}/v4/soak/app/ws`, token)
          counts.websockets++
        }
      } catch (error) {
        counts.failures++
        if (failures.length < 20) failures.push((error as Error).message)
      }
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  // let pending webhook retries and keep-alive sockets settle
  await sleep(3000)
  clearInterval(sampler)
  clearInterval(heapSampler)
  await readLiveHeap()
  probe.close()
  const end = procStats(sidecar.pid)

  // webhooks: each run id delivered exactly once when any attempt got a 200, and only then, within the retry table
  const webhookProblems: string[] = []
  let delivered = 0
  for (let n = 0; n < seq; n++) {
    const runId = `soak-${n + 1}`
    const statuses = receiver.deliveries.get(runId)
    if (statuses === undefined) continue
    const oks = statuses.filter(status => status === 200).length
    if (oks > 1) webhookProblems.push(`${runId}: delivered ${oks} times`)
    if (statuses.length > ATTEMPTS) webhookProblems.push(`${runId}: ${statuses.length} attempts`)
    if (oks === 1 && statuses.at(-1) !== 200) webhookProblems.push(`${runId}: attempts after a 200`)
    if (oks === 0 && statuses.length < ATTEMPTS) webhookProblems.push(`${runId}: gave up after ${statuses.length} retryable failures`)
    if (oks === 1) delivered++
  }
  if (receiver.deliveries.size !== counts.webhooks) webhookProblems.push(`${counts.webhooks} webhooks asked for, ${receiver.deliveries.size} seen by the receiver`)

  // memory: the live heap of the last quarter must not sit well above the second quarter's
  // (warm-up excluded); RSS may swing with V8's heap limit, but not run away
  const quarter = Math.max(1, Math.floor(samples.length / 4))
  const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN
  const earlyRss = median(samples.slice(quarter, 2 * quarter).map(s => s.rssMb))
  const lateRss = median(samples.slice(-quarter).map(s => s.rssMb))
  const runSeconds = elapsed()
  const earlyHeap = median(liveHeap.filter(h => h.t >= runSeconds / 4 && h.t < runSeconds / 2).map(h => h.mb))
  const lateHeap = median(liveHeap.filter(h => h.t >= runSeconds * 3 / 4).map(h => h.mb))
  const heapGrowing = !Number.isFinite(earlyHeap) || !Number.isFinite(lateHeap) || (lateHeap > earlyHeap * 1.2 && lateHeap - earlyHeap > 5)
  const memoryGrowing = heapGrowing || (lateRss > earlyRss * 2 && lateRss - earlyRss > 100)
  const socketLeak = end.sockets > baseline.sockets + 2 * CONCURRENCY + 8

  const result = {
    seconds: SECONDS, concurrency: CONCURRENCY, counts, failures,
    webhooks: { asked: counts.webhooks, seen: receiver.deliveries.size, delivered, problems: webhookProblems.slice(0, 20) },
    rssMb: { baseline: baseline.rssMb, early: earlyRss, late: lateRss, peak: Math.max(...samples.map(s => s.rssMb)) },
    liveHeapMb: { early: earlyHeap, late: lateHeap, readings: liveHeap },
    sockets: { baseline: baseline.sockets, end: end.sockets, peak: Math.max(...samples.map(s => s.sockets)) },
    fds: { baseline: baseline.fds, end: end.fds },
    verdict: { memoryGrowing, socketLeak, callFailures: counts.failures > 0, webhookProblems: webhookProblems.length > 0 },
    samples
  }
  writeFileSync(join(ROOT, 'bench/results/soak.json'), JSON.stringify(result, null, 2) + '\n')
  const { samples: _omitted, ...summary } = result
  process.stdout.write(JSON.stringify(summary, null, 2) + '\n')
  await sidecar.stop()
  await app.stop()
  await Promise.all([receiver.close(), jwks.close()])
  const failed = Object.values(result.verdict).some(Boolean)
  process.stdout.write(failed ? 'soak: FAIL\n' : 'soak: PASS\n')
  return failed ? 1 : 0
}

// fleet: two sidecars on Redis Sentinel, a sidecar killed and a failover every two minutes;
// interruptible: two replicas on spot terms, one stopped every 30 s, runs retried (RUN_MAX_ATTEMPTS)
const soakCase = process.env.SOAK_CASE ?? ''
const run = soakCase === 'fleet' ? soakFleet : soakCase === 'interruptible' ? soakInterruptible : main
run().then(code => { process.exitCode = code }, error => {
  killAllChildren()
  process.stderr.write(`soak${soakCase === '' ? '' : ` ${soakCase}`}: ${(error as Error).stack ?? String(error)}\n`)
  process.exitCode = 1
})
