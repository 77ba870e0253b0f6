import { mkdtempSync, writeFileSync } from 'node:fs'
import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { type ReceiverAction, startWebhookReceiver } from '../test/helpers/webhook-receiver.ts'
import { type BenchChild, freePort, guardAgainstOrphans, spawnChild, waitForHttp200 } from './child-processes.ts'
import { type Failover, inFailoverWindow, type SoakSentinel, startSoakSentinel, whenAgainstFailovers } from './soak-failovers.ts'

/**
 * `SOAK_CASE=fleet npm run soak`: SOAK_SECONDS (default 600) of async and idempotent traffic, with
 * webhooks to a flaky receiver, through two sidecars sharing a Redis Sentinel topology (primary,
 * replica, three sentinels; RUN_STORE_URL=redis+sentinel://…), one sidecar SIGKILLed and restarted
 * every SOAK_KILL_EVERY_S (default 120), and every SOAK_FAILOVER_EVERY_S (default 120, the first at
 * half of it) a failover: the primary SIGKILLed, then started again as the new primary's replica.
 * Fails (exit 1) when a webhook is lost (an async run accepted in a failover's window aside: see
 * soak-failovers.ts), a delivery makes more than WEBHOOK_ATTEMPTS + 1 attempts, an idempotent
 * request reaches the app twice, or a repeat gets another answer; results in
 * bench/results/soak-fleet.json. Also what both soaks share (receiver, POST, ROOT).
 */
export const ROOT = fileURLToPath(new URL('../', import.meta.url))
const SECONDS = Number(process.env.SOAK_SECONDS ?? 600)
const KILL_EVERY_S = Number(process.env.SOAK_KILL_EVERY_S ?? 120)
const FAILOVER_EVERY_S = Number(process.env.SOAK_FAILOVER_EVERY_S ?? 120)
const CONCURRENCY = Number(process.env.SOAK_CONCURRENCY ?? 16)
const ATTEMPTS = 3
/** After the traffic: long enough for the deliveries of the last killed sidecar to be taken over (30 s idle, 10 s beats) and retried. */
const SETTLE_S = 60

/**
 * A webhook receiver (test/helpers/webhook-receiver.ts) whose every attempt gets `roll()`'s
 * answer, with each run id's statuses in order (0: connection reset, -1: hung); both soaks use it.
 */
export async function startFlakyReceiver (roll: () => ReceiverAction): Promise<{ url: string, deliveries: Map<string, number[]>, close: () => Promise<void> }> {
  const deliveries = new Map<string, number[]>()
  const receiver = await startWebhookReceiver([], roll, {
    record: false,
    onAttempt: ({ headers, action }) => {
      const runId = String(headers['x-request-id'])
      const statuses = deliveries.get(runId) ?? []
      deliveries.set(runId, statuses)
      statuses.push(action === 'reset' ? 0 : action === 'hang' ? -1 : typeof action === 'number' ? action : action.status)
    }
  })
  return { url: `${receiver.url}/hook`, deliveries, close: receiver.close }
}

/** The app: answers after a few ms, and counts the requests per Idempotency-Key (a key may reach it once). */
async function startCountingApp (): Promise<{ url: string, byKey: Map<string, number>, close: () => Promise<void> }> {
  const byKey = new Map<string, number>()
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const key = req.headers['idempotency-key']
      if (typeof key === 'string') byKey.set(key, (byKey.get(key) ?? 0) + 1)
      setTimeout(() => { res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}') }, 2 + Math.random() * 20)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    byKey,
    close: async () => { server.closeAllConnections(); await new Promise(resolve => server.close(resolve)) }
  }
}

/** A JSON POST (a new request on the global agent): its status and body. */
export function post (url: string, headers: Record<string, string>, body = '{"soak":true}'): Promise<{ status: number, body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' } }, res => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (text: string) => { body += text })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, body }) })
    })
    req.on('error', reject)
    req.end(body)
  })
}

interface Sidecar { name: string, port: number, adminPort: number, child: BenchChild | undefined }

/** An owed webhook's run: when its 202 (async) or 200 (sync) arrived, in seconds since the traffic began. */
interface Owed { at: number, async: boolean }

/**
 * The status of GET …/_runs/<runId> (404: the record vanished), then the record's status, its
 * times in seconds since `started` (epoch ms), and its webhook's.
 */
async function runRecord (sidecar: Sidecar, runId: string, started: number): Promise<string> {
  try {
    const response = await fetch(`http://127.0.0.1:${sidecar.port}/v4/soak/app/_runs/${runId}`, { signal: AbortSignal.timeout(5000) })
    const body = await response.text()
    if (response.status !== 200) return String(response.status)
    const record = JSON.parse(body) as Record<string, string | undefined> & { webhook?: { status?: string, attempts?: number } }
    const at = (field: string): string => record[field] === undefined ? '-' : ((Date.parse(record[field]) - started) / 1000).toFixed(3)
    return `200 ${record.status} (created ${at('created_at')}, started ${at('started_at')}, completed ${at('completed_at')}) webhook ${record.webhook?.status} after ${record.webhook?.attempts}`
  } catch (error) {
    return `GET failed: ${(error as Error).message}`
  }
}

/** The fleet soak; its exit code. */
export async function soakFleet (): Promise<number> {
  let stopRedisNow = (): void => {}
  guardAgainstOrphans(() => { stopRedisNow() })
  const logDir = mkdtempSync(join(tmpdir(), 'app-sidecar-soak-fleet-'))
  const sentinel = await startSoakSentinel()
  stopRedisNow = sentinel.stopNow
  // 404 (retry), a reset connection (retry), a hang past the attempt's time limit (retry), or 200
  const receiver = await startFlakyReceiver(() => {
    const roll = Math.random()
    return roll < 0.2 ? 404 : roll < 0.25 ? 'reset' : roll < 0.28 ? 'hang' : 200
  })
  const app = await startCountingApp()
  const sidecars: Sidecar[] = []
  try {
    for (const name of ['sidecar-a', 'sidecar-b']) sidecars.push({ name, port: await freePort(), adminPort: await freePort(), child: undefined })
    return await drive(sidecars, sentinel, receiver, app, logDir)
  } finally {
    for (const sidecar of sidecars) await sidecar.child?.stop()
    await sentinel.stop()
    await Promise.all([receiver.close(), app.close()])
  }
}

async function drive (
  sidecars: Sidecar[], sentinel: SoakSentinel,
  receiver: Awaited<ReturnType<typeof startFlakyReceiver>>, app: Awaited<ReturnType<typeof startCountingApp>>, logDir: string
): Promise<number> {
  const start = async (sidecar: Sidecar): Promise<void> => {
    sidecar.child = spawnChild({
      name: sidecar.name,
      command: process.execPath,
      args: ['dist/bin/app-sidecar.js'],
      env: {
        PORT: String(sidecar.port), ADMIN_PORT: String(sidecar.adminPort), HOST: '127.0.0.1', APP_URL: app.url, DISABLE_AUTH: 'true',
        PROJECT_ID: 'soak', APP_NAME: 'app', RUN_STORE_URL: sentinel.redis.url, LOG_LEVEL: 'warn', REPLICA_CONCURRENCY: '8',
        WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_ATTEMPTS: String(ATTEMPTS), WEBHOOK_MAX_DELAY_MS: '200', WEBHOOK_TIMEOUT_MS: '1000'
      },
      cwd: ROOT,
      logDir
    })
    await waitForHttp200(sidecar.child, `http://127.0.0.1:${sidecar.adminPort}/readyz`)
  }
  for (const sidecar of sidecars) await start(sidecar)

  const started = Date.now()
  const elapsed = (): number => (Date.now() - started) / 1000
  const running = (): boolean => Date.now() - started < SECONDS * 1000
  const counts = { asyncAccepted: 0, syncAnswered: 0, repeats: 0, replayed: 0, inProgress: 0, refused: 0, connectionErrors: 0, kills: 0, failovers: 0 }
  /** The refused first calls (not 202, not 200) by status. */
  const refusedByStatus: Record<string, number> = {}
  const refuse = (status: number): void => { counts.refused++; refusedByStatus[status] = (refusedByStatus[status] ?? 0) + 1 }
  /** The runs whose webhook must arrive: async runs accepted (202), sync calls answered (200). */
  const owed = new Map<string, Owed>()
  /** When each idempotent key's first call was answered. */
  const keyAt = new Map<string, number>()
  const killedAt: number[] = []
  const failovers: Failover[] = []
  const problems: string[] = []
  let seq = 0

  const killer = (async () => {
    let victim = 0
    while (running()) {
      await sleep(Math.min(KILL_EVERY_S * 1000, Math.max(0, SECONDS * 1000 - (Date.now() - started))))
      if (!running()) break
      const sidecar = sidecars[victim % 2] as Sidecar
      victim++
      killedAt.push(elapsed())
      if (sidecar.child !== undefined) process.kill(sidecar.child.pid, 'SIGKILL')
      while (sidecar.child !== undefined && sidecar.child.exited === null) await sleep(20)
      counts.kills++
      await start(sidecar)
    }
  })()
  // first at half the period, between the sidecar kills when both periods are equal
  const failing = (async () => {
    if (!(FAILOVER_EVERY_S > 0)) return
    for (let at = FAILOVER_EVERY_S / 2; at < SECONDS; at += FAILOVER_EVERY_S) {
      await sleep(Math.max(0, at * 1000 - (Date.now() - started)))
      if (!running()) break
      failovers.push(await sentinel.failover(elapsed))
      counts.failovers++
    }
  })()
  // awaited after the traffic; a failure meanwhile must not be an unhandled rejection
  killer.catch(() => {})
  failing.catch(() => {})

  const worker = async (): Promise<void> => {
    while (running()) {
      const n = ++seq
      const sidecar = sidecars[n % 2] as Sidecar
      const base = `http://127.0.0.1:${sidecar.port}/v4/soak/app`
      const hook = `webhookEndpoint=${encodeURIComponent(receiver.url)}`
      const runId = `fleet-${n}`
      try {
        if (n % 2 === 0) {
          const r = await post(`${base}/run?async=true&${hook}`, { 'x-request-id': runId })
          if (r.status === 202) { counts.asyncAccepted++; owed.set(runId, { at: elapsed(), async: true }) } else refuse(r.status)
        } else {
          // an idempotent sync call with a webhook, then its retry on the other sidecar
          const key = `key-${n}`
          const first = await post(`${base}/run?${hook}`, { 'x-request-id': runId, 'idempotency-key': key })
          keyAt.set(key, elapsed())
          if (first.status === 200) { counts.syncAnswered++; owed.set(runId, { at: elapsed(), async: false }) } else refuse(first.status)
          const other = sidecars[(n + 1) % 2] as Sidecar
          const repeat = await post(`http://127.0.0.1:${other.port}/v4/soak/app/run?${hook}`, { 'x-request-id': `${runId}-retry`, 'idempotency-key': key })
          counts.repeats++
          if (repeat.status === 409) counts.inProgress++
          else if (first.status === 200 && repeat.status === 200 && repeat.body !== first.body) problems.push(`${key}: the repeat got another answer ${whenAgainstFailovers(failovers, killedAt, elapsed())}`)
          else if (repeat.status === 200) counts.replayed++
        }
      } catch {
        counts.connectionErrors++ // a sidecar was killed under the call: its outcome is unknown, nothing is owed
        await sleep(50)
      }
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  const trafficSeconds = elapsed()
  await killer
  await failing
  await sleep(SETTLE_S * 1000)

  // a webhook owed and never seen: an async run accepted in a failover's window may have vanished
  // with what the killed primary had not yet replicated (documented); any other is a loss
  const lostRuns: Array<{ runId: string, async: boolean, at: number }> = []
  const lostInWindow: Array<{ runId: string, at: number }> = []
  let overAttempts = 0
  let delivered = 0
  for (const [runId, { at, async }] of owed) {
    const statuses = receiver.deliveries.get(runId)
    if (statuses === undefined) {
      if (async && inFailoverWindow(failovers, at) !== undefined) lostInWindow.push({ runId, at })
      else lostRuns.push({ runId, async, at })
      continue
    }
    if (statuses.length > ATTEMPTS + 1) { overAttempts++; if (problems.length < 40) problems.push(`${runId}: ${statuses.length} attempts (${statuses.join(', ')}); ${async ? '202' : '200'} ${whenAgainstFailovers(failovers, killedAt, at)}`) }
    if (statuses.includes(200)) delivered++
  }
  const reader = sidecars[0] as Sidecar
  for (const { runId, async, at } of lostRuns.slice(0, 40)) {
    problems.push(`${runId}: no delivery seen; ${async ? '202' : '200'} ${whenAgainstFailovers(failovers, killedAt, at)}; GET → ${await runRecord(reader, runId, started)}`)
  }
  const windowGets: Record<string, number> = {}
  for (const { runId } of lostInWindow.slice(0, 200)) {
    const got = (await runRecord(reader, runId, started)).split(' ')[0] as string
    windowGets[got] = (windowGets[got] ?? 0) + 1
  }
  let twice = 0
  for (const [key, n] of app.byKey) {
    if (n > 1) { twice++; if (problems.length < 60) problems.push(`${key}: reached the app ${n} times; answered ${whenAgainstFailovers(failovers, killedAt, keyAt.get(key) ?? NaN)}`) }
  }
  const result = {
    seconds: SECONDS, killEverySeconds: KILL_EVERY_S, failoverEverySeconds: FAILOVER_EVERY_S, concurrency: CONCURRENCY,
    startedAt: new Date(started).toISOString(), wallSeconds: Math.round(elapsed()), trafficSeconds: Math.round(trafficSeconds), runStore: 'redis+sentinel (a primary, a replica, 3 sentinels)',
    counts,
    refusedByStatus,
    kills: killedAt.map(t => Number(t.toFixed(3))),
    failovers: failovers.map(f => ({ ...f, killedAt: Number(f.killedAt.toFixed(3)), switchedAt: Number(f.switchedAt.toFixed(3)), rejoinedAt: Number(f.rejoinedAt.toFixed(3)) })),
    webhooks: {
      owed: owed.size,
      seen: [...owed.keys()].filter(id => receiver.deliveries.has(id)).length,
      delivered,
      lost: lostRuns.length,
      lostInFailoverWindow: lostInWindow.length,
      overAttempts
    },
    lostInFailoverWindow: {
      count: lostInWindow.length,
      /** GET of the run (up to 200 of them): status → how many. */
      runGet: windowGets,
      runs: lostInWindow.map(({ runId, at }) => `${runId} ${whenAgainstFailovers(failovers, killedAt, at)}`)
    },
    idempotentKeys: { reachedApp: app.byKey.size, twice },
    problems,
    verdict: { webhookLost: lostRuns.length > 0, tooManyAttempts: overAttempts > 0, idempotentTwice: twice > 0, wrongReplay: problems.some(p => p.includes('another answer')) }
  }
  writeFileSync(join(ROOT, 'bench/results/soak-fleet.json'), JSON.stringify(result, null, 2) + '\n')
  process.stdout.write(JSON.stringify(result, null, 2) + '\n')
  const failed = Object.values(result.verdict).some(Boolean)
  process.stdout.write(failed ? 'soak fleet: FAIL\n' : 'soak fleet: PASS\n')
  return failed ? 1 : 0
}
