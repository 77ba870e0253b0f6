import { mkdtempSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { startPrivateRedis } from '../test/helpers/redis-server.ts'
import { startWebhookReceiver } from '../test/helpers/webhook-receiver.ts'
import { type BenchChild, freePort, guardAgainstOrphans, spawnChild, waitForHttp200 } from './child-processes.ts'
import { post, ROOT } from './soak-fleet.ts'

/**
 * `SOAK_CASE=interruptible npm run soak` (docs/runs.md, "Running on interruptible capacity"):
 * two replicas on interruptible terms share a private Redis, each sidecar with RUN_MAX_ATTEMPTS=3
 * and a grace period of 1 s. SOAK_RUNS (default 1,000) async runs of 2 to 5 s at the app, each with
 * a webhook, are submitted at once; every SOAK_KILL_EVERY_S (default 30) one replica's sidecar is
 * stopped, by turns SIGKILL (found lost by the other after RUN_LOST_AFTER_SECONDS) and SIGTERM
 * (its runs cut at the grace period's end), and a fresh one (a new HOSTNAME, as a new pod) takes
 * its place. Ends once every run has ended (at most SOAK_SECONDS, default 900). Fails (exit 1)
 * unless every run ended `succeeded` with exactly one webhook; reports the attempts per run, as
 * the records and the app saw them, in bench/results/soak-interruptible.json.
 */
const RUNS = Number(process.env.SOAK_RUNS ?? 1000)
const KILL_EVERY_S = Number(process.env.SOAK_KILL_EVERY_S ?? 30)
const SECONDS = Number(process.env.SOAK_SECONDS ?? 900)
const SLOTS = Number(process.env.SOAK_SLOTS ?? 8)
const SUBMITTERS = 16

/** A run's time at the app: 2 to 5 s, the same for every attempt of a run (it is the same work). */
const runMs = (n: number): number => 2000 + (n * 7919) % 3001

/** The app both replicas call: each attempt of each run, as it saw them; an attempt cut (its sidecar gone) is dropped. */
async function startApp (): Promise<{ url: string, attempts: Map<string, string[]>, server: Server }> {
  const attempts = new Map<string, string[]>()
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      const runId = String(req.headers['x-request-id'])
      const attempt = String(req.headers['x-run-attempt'] ?? 'none')
      attempts.set(runId, [...attempts.get(runId) ?? [], attempt])
      const timer = setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ ok: true, attempt: Number(attempt) }))
      }, runMs(Number(runId.slice(runId.indexOf('-') + 1))))
      res.once('close', () => { clearTimeout(timer) })
    })
  })
  server.keepAliveTimeout = 60_000
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, attempts, server }
}

interface Replica { name: string, port: number, adminPort: number, child: BenchChild, stopping?: boolean }
interface Stop { at: number, replica: string, signal: 'SIGKILL' | 'SIGTERM', exitedAfterS: number }
interface RunEnd { status: string, attempt: number | undefined, reasons: string[], webhook: string | undefined }

/** The interruptible soak; its exit code. */
export async function soakInterruptible (): Promise<number> {
  const teardowns: Array<() => unknown> = []
  const redis = await startPrivateRedis({ teardown: fn => { teardowns.push(fn) } })
  guardAgainstOrphans(() => { void redis.stop() })
  const logDir = mkdtempSync(join(tmpdir(), 'app-sidecar-soak-interruptible-'))
  const webhooks = new Map<string, number>()
  const receiver = await startWebhookReceiver([], 200, {
    record: false,
    onAttempt: ({ headers }) => { const runId = String(headers['x-request-id']); webhooks.set(runId, (webhooks.get(runId) ?? 0) + 1) }
  })
  const app = await startApp()
  const replicas: Replica[] = []
  let born = 0
  const startReplica = async (): Promise<Replica> => {
    const name = `replica-${++born}`
    const port = await freePort()
    const adminPort = await freePort()
    const child = spawnChild({
      name,
      command: process.execPath,
      args: ['dist/bin/app-sidecar.js'],
      env: {
        PORT: String(port), ADMIN_PORT: String(adminPort), HOST: '127.0.0.1', APP_URL: app.url, DISABLE_AUTH: 'true', HOSTNAME: name,
        PROJECT_ID: 'soak', APP_NAME: 'app', RUN_STORE_URL: redis.url, LOG_LEVEL: 'warn', REPLICA_CONCURRENCY: String(SLOTS),
        RUN_MAX_ATTEMPTS: '3', RESPONSE_GRACE_PERIOD_SECONDS: '1', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8'
      },
      cwd: ROOT,
      logDir
    })
    await waitForHttp200(child, `http://127.0.0.1:${adminPort}/readyz`)
    return { name, port, adminPort, child }
  }
  try {
    replicas.push(await startReplica(), await startReplica())
    return await drive(replicas, startReplica, `${receiver.url}/hook`, app.attempts, webhooks, logDir)
  } finally {
    for (const replica of replicas) await replica.child.stop()
    await Promise.all([receiver.close(), new Promise(resolve => app.server.close(resolve))])
    app.server.closeAllConnections()
    for (const teardown of teardowns) await teardown()
  }
}

async function drive (replicas: Replica[], startReplica: () => Promise<Replica>, hook: string,
  appAttempts: Map<string, string[]>, webhooks: Map<string, number>, logDir: string): Promise<number> {
  const started = Date.now()
  const elapsed = (): number => (Date.now() - started) / 1000
  const ids = Array.from({ length: RUNS }, (_, i) => `run-${i + 1}`)
  const ends = new Map<string, RunEnd>()
  const refused: Record<string, number> = {}

  // every run submitted at once, by turns to each replica (another one when a submission fails)
  let nextRun = 0
  const submitter = async (): Promise<void> => {
    for (let i = nextRun++; i < ids.length; i = nextRun++) {
      for (let tries = 0; ; tries++) {
        const replica = replicas[(i + tries) % replicas.length] as Replica
        const answer = await post(`http://127.0.0.1:${replica.port}/v4/soak/app/work?async=true&webhookEndpoint=${encodeURIComponent(hook)}`,
          { 'x-request-id': ids[i] as string }).catch(() => ({ status: 0, body: '' }))
        if (answer.status === 202) break
        refused[answer.status] = (refused[answer.status] ?? 0) + 1
        if (answer.status === 409) break // accepted by a try whose answer was lost
        await sleep(200)
      }
    }
  }
  await Promise.all(Array.from({ length: SUBMITTERS }, submitter))
  const submittedInS = elapsed()

  const unfinished = (): string[] => ids.filter(id => !ends.has(id))
  const stops: Stop[] = []
  const killer = (async () => {
    for (let round = 0; elapsed() < SECONDS; round++) {
      await sleep(Math.max(0, (round + 1) * KILL_EVERY_S * 1000 - (Date.now() - started)))
      if (unfinished().length === 0 || elapsed() >= SECONDS) return
      const index = round % replicas.length
      const victim = replicas[index] as Replica
      const signal = round % 2 === 0 ? 'SIGKILL' : 'SIGTERM'
      const at = elapsed()
      victim.stopping = true
      try { process.kill(victim.child.pid, signal) } catch {} // gone already: replaced below all the same
      while (victim.child.exited === null) await sleep(20)
      stops.push({ at: Number(at.toFixed(3)), replica: victim.name, signal, exitedAfterS: Number((elapsed() - at).toFixed(3)) })
      replicas[index] = await startReplica()
    }
  })()
  killer.catch(() => {})

  // every run's end, read on a live replica; a replica that stopped by itself (or was stopped by
  // anything but this soak) is replaced too, and reported
  const unexpected: Array<{ at: number, replica: string, exit: string }> = []
  while (unfinished().length > 0 && elapsed() < SECONDS) {
    for (const [index, replica] of replicas.entries()) {
      if (replica.child.exited === null || replica.stopping === true) continue
      replica.stopping = true
      unexpected.push({ at: Number(elapsed().toFixed(3)), replica: replica.name, exit: String(replica.child.exited.code ?? replica.child.exited.signal) })
      replicas[index] = await startReplica()
    }
    for (const id of unfinished()) {
      const reader = replicas.find(replica => replica.child.exited === null)
      if (reader === undefined) break
      const record = await fetch(`http://127.0.0.1:${reader.port}/v4/soak/app/_runs/${id}`, { signal: AbortSignal.timeout(5000) })
        .then(async response => response.status === 200 ? await response.json() as Record<string, unknown> : undefined).catch(() => undefined)
      const status = record?.status as string | undefined
      if (status === undefined || status === 'queued' || status === 'running') continue
      const interruptions = (record?.interruptions ?? []) as Array<{ reason: string }>
      ends.set(id, { status, attempt: record?.attempt as number | undefined, reasons: interruptions.map(i => i.reason), webhook: (record?.webhook as { status?: string } | undefined)?.status })
    }
    await sleep(1000)
  }
  const endedInS = elapsed()
  await killer
  // the last webhooks, and any late duplicate, have time to arrive
  await sleep(10_000)

  const histogram = (values: Array<number | string>): Record<string, number> => {
    const counts: Record<string, number> = {}
    for (const value of values) counts[String(value)] = (counts[String(value)] ?? 0) + 1
    return counts
  }
  const statuses = histogram(ids.map(id => ends.get(id)?.status ?? 'not ended'))
  const reasons = histogram([...ends.values()].flatMap(end => end.reasons))
  const webhookCounts = histogram(ids.map(id => webhooks.get(id) ?? 0))
  const attemptsByRecord = histogram(ids.map(id => ends.get(id)?.attempt ?? 'none'))
  const appSeen = histogram(ids.map(id => appAttempts.get(id)?.length ?? 0))
  const appAttemptNumbers = ids.filter(id => (appAttempts.get(id) ?? []).some((attempt, i) => attempt !== String(i + 1)))
  const lost = ids.filter(id => !ends.has(id))
  const notSucceeded = ids.filter(id => ends.has(id) && ends.get(id)?.status !== 'succeeded')
  const notOneWebhook = ids.filter(id => (webhooks.get(id) ?? 0) !== 1)
  const result = {
    runs: RUNS, slotsPerReplica: SLOTS, killEverySeconds: KILL_EVERY_S, runMs: '2000-5000', maxAttempts: 3, gracePeriodSeconds: 1,
    startedAt: new Date(started).toISOString(), submittedInSeconds: Number(submittedInS.toFixed(1)), allEndedInSeconds: Number(endedInS.toFixed(1)),
    refusedSubmissions: refused,
    stops,
    unexpectedStops: unexpected,
    statuses,
    attemptsPerRun: attemptsByRecord,
    appRequestsPerRun: appSeen,
    interruptionsByReason: reasons,
    webhooksPerRun: webhookCounts,
    lostRuns: lost.length,
    problems: [
      ...lost.slice(0, 20).map(id => `${id}: not ended`),
      ...notSucceeded.slice(0, 20).map(id => `${id}: ${JSON.stringify(ends.get(id))}`),
      ...notOneWebhook.slice(0, 20).map(id => `${id}: ${webhooks.get(id) ?? 0} webhooks`),
      ...appAttemptNumbers.slice(0, 20).map(id => `${id}: the app saw attempts ${(appAttempts.get(id) ?? []).join(', ')}`)
    ],
    logs: logDir,
    verdict: { runLost: lost.length > 0, runNotSucceeded: notSucceeded.length > 0, webhookNotOnce: notOneWebhook.length > 0, attemptsOutOfOrder: appAttemptNumbers.length > 0 }
  }
  writeFileSync(join(ROOT, 'bench/results/soak-interruptible.json'), JSON.stringify(result, null, 2) + '\n')
  process.stdout.write(JSON.stringify(result, null, 2) + '\n')
  const failed = Object.values(result.verdict).some(Boolean)
  process.stdout.write(failed ? 'soak interruptible: FAIL\n' : 'soak interruptible: PASS\n')
  return failed ? 1 : 0
}
