import { mkdtempSync, writeFileSync } from 'node:fs'
import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { startPrivateRedis } from '../test/helpers/redis-server.ts'
import { type ReceiverAction, startWebhookReceiver } from '../test/helpers/webhook-receiver.ts'
import { type BenchChild, freePort, guardAgainstOrphans, spawnChild, waitForHttp200 } from './child-processes.ts'

/**
 * `SOAK_CASE=fleet npm run soak`: SOAK_SECONDS (default 600) of async and idempotent traffic, with
 * webhooks to a flaky receiver, through two sidecars sharing a private redis-server, one SIGKILLed
 * and restarted every SOAK_KILL_EVERY_S (default 120). Fails (exit 1) when a webhook is lost, a
 * delivery makes more than WEBHOOK_ATTEMPTS + 1 attempts, or an idempotent request reaches the app
 * twice; results in bench/results/soak-fleet.json. Also what both soaks share (receiver, POST, ROOT).
 */
export const ROOT = fileURLToPath(new URL('../', import.meta.url))
const SECONDS = Number(process.env.SOAK_SECONDS ?? 600)
const KILL_EVERY_S = Number(process.env.SOAK_KILL_EVERY_S ?? 120)
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

/** The fleet soak; its exit code. */
export async function soakFleet (): Promise<number> {
  guardAgainstOrphans(() => {})
  const logDir = mkdtempSync(join(tmpdir(), 'app-sidecar-soak-fleet-'))
  const redis = await startPrivateRedis({ teardown: () => {} }) // stopped below
  // 404 (retry), a reset connection (retry), a hang past the attempt's time limit (retry), or 200
  const receiver = await startFlakyReceiver(() => {
    const roll = Math.random()
    return roll < 0.2 ? 404 : roll < 0.25 ? 'reset' : roll < 0.28 ? 'hang' : 200
  })
  const app = await startCountingApp()
  const sidecars: Sidecar[] = []
  for (const name of ['sidecar-a', 'sidecar-b']) sidecars.push({ name, port: await freePort(), adminPort: await freePort(), child: undefined })
  const start = async (sidecar: Sidecar): Promise<void> => {
    sidecar.child = spawnChild({
      name: sidecar.name,
      command: process.execPath,
      args: ['dist/bin/app-sidecar.js'],
      env: {
        PORT: String(sidecar.port), ADMIN_PORT: String(sidecar.adminPort), HOST: '127.0.0.1', APP_URL: app.url, DISABLE_AUTH: 'true',
        PROJECT_ID: 'soak', APP_NAME: 'app', RUN_STORE_URL: redis.url, LOG_LEVEL: 'warn', REPLICA_CONCURRENCY: '8',
        WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', WEBHOOK_ATTEMPTS: String(ATTEMPTS), WEBHOOK_MAX_DELAY_MS: '200', WEBHOOK_TIMEOUT_MS: '1000'
      },
      cwd: ROOT,
      logDir
    })
    await waitForHttp200(sidecar.child, `http://127.0.0.1:${sidecar.adminPort}/readyz`)
  }
  for (const sidecar of sidecars) await start(sidecar)

  const started = Date.now()
  const running = (): boolean => Date.now() - started < SECONDS * 1000
  const counts = { asyncAccepted: 0, syncAnswered: 0, repeats: 0, replayed: 0, inProgress: 0, refused: 0, connectionErrors: 0, kills: 0 }
  /** Run ids whose webhook must arrive: async runs accepted (202), sync calls answered (200). */
  const owed = new Set<string>()
  const problems: string[] = []
  let seq = 0

  const killer = (async () => {
    let victim = 0
    while (running()) {
      await sleep(Math.min(KILL_EVERY_S * 1000, Math.max(0, SECONDS * 1000 - (Date.now() - started))))
      if (!running()) break
      const sidecar = sidecars[victim % 2] as Sidecar
      victim++
      if (sidecar.child !== undefined) process.kill(sidecar.child.pid, 'SIGKILL')
      while (sidecar.child !== undefined && sidecar.child.exited === null) await sleep(20)
      counts.kills++
      await start(sidecar)
    }
  })()

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
          if (r.status === 202) { counts.asyncAccepted++; owed.add(runId) } else counts.refused++
        } else {
          // an idempotent sync call with a webhook, then its retry on the other sidecar
          const key = `key-${n}`
          const first = await post(`${base}/run?${hook}`, { 'x-request-id': runId, 'idempotency-key': key })
          if (first.status === 200) { counts.syncAnswered++; owed.add(runId) } else counts.refused++
          const other = sidecars[(n + 1) % 2] as Sidecar
          const repeat = await post(`http://127.0.0.1:${other.port}/v4/soak/app/run?${hook}`, { 'x-request-id': `${runId}-retry`, 'idempotency-key': key })
          counts.repeats++
          if (repeat.status === 409) counts.inProgress++
          else if (first.status === 200 && repeat.status === 200 && repeat.body !== first.body) problems.push(`${key}: the repeat got another answer`)
          else if (repeat.status === 200) counts.replayed++
        }
      } catch {
        counts.connectionErrors++ // a sidecar was killed under the call: its outcome is unknown, nothing is owed
        await sleep(50)
      }
    }
  }
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  await killer
  await sleep(SETTLE_S * 1000)

  let lost = 0
  let overAttempts = 0
  let delivered = 0
  for (const runId of owed) {
    const statuses = receiver.deliveries.get(runId)
    if (statuses === undefined) { lost++; if (problems.length < 20) problems.push(`${runId}: no delivery seen`); continue }
    if (statuses.length > ATTEMPTS + 1) { overAttempts++; if (problems.length < 20) problems.push(`${runId}: ${statuses.length} attempts`) }
    if (statuses.includes(200)) delivered++
  }
  let twice = 0
  for (const [key, n] of app.byKey) {
    if (n > 1) { twice++; if (problems.length < 20) problems.push(`${key}: reached the app ${n} times`) }
  }
  const result = {
    seconds: SECONDS, killEverySeconds: KILL_EVERY_S, concurrency: CONCURRENCY, counts,
    webhooks: { owed: owed.size, seen: [...owed].filter(id => receiver.deliveries.has(id)).length, delivered, lost, overAttempts },
    idempotentKeys: { reachedApp: app.byKey.size, twice },
    problems,
    verdict: { webhookLost: lost > 0, tooManyAttempts: overAttempts > 0, idempotentTwice: twice > 0, wrongReplay: problems.some(p => p.includes('another answer')) }
  }
  writeFileSync(join(ROOT, 'bench/results/soak-fleet.json'), JSON.stringify(result, null, 2) + '\n')
  process.stdout.write(JSON.stringify(result, null, 2) + '\n')
  for (const sidecar of sidecars) await sidecar.child?.stop()
  await redis.stop()
  await Promise.all([receiver.close(), app.close()])
  const failed = Object.values(result.verdict).some(Boolean)
  process.stdout.write(failed ? 'soak fleet: FAIL\n' : 'soak fleet: PASS\n')
  return failed ? 1 : 0
}
