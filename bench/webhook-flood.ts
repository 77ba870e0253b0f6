import { mkdtempSync, readdirSync } from 'node:fs'
import { Agent, request } from 'node:http'
import { createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { isAbsolute, join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { scrapeMetrics } from '../test/helpers/admin-metrics.ts'
import { freePort, guardAgainstOrphans, killAllChildren, spawnChild, waitForHttp200 } from './child-processes.ts'
import { peakRssMb, rssMb } from './process-memory.ts'

/**
 * `npm run build && node --import tsx bench/webhook-flood.ts`: a measurement, not a test. Floods a
 * sidecar process (FLOOD_SIDECAR_BIN, default this build's) for FLOOD_SECONDS with calls whose
 * webhookEndpoint is a loopback receiver that never answers, then watches FLOOD_SETTLE_SECONDS
 * more; prints the peak connections open at the receiver, the sidecar's peak fds and RSS, and what
 * is still open at the end. FLOOD_ENV='WEBHOOK_MAX_PENDING=500 …' adds sidecar variables.
 */
const ROOT = fileURLToPath(new URL('../', import.meta.url))
const SECONDS = Number(process.env.FLOOD_SECONDS ?? 30)
const SETTLE_SECONDS = Number(process.env.FLOOD_SETTLE_SECONDS ?? 15)
const CONCURRENCY = Number(process.env.FLOOD_CONCURRENCY ?? 64)
const SIDECAR_BIN = process.env.FLOOD_SIDECAR_BIN ?? 'dist/bin/app-sidecar.js'
const EXTRA_ENV = Object.fromEntries((process.env.FLOOD_ENV ?? '').split(/\s+/).filter(pair => pair.includes('=')).map(pair => pair.split(/=(.*)/s).slice(0, 2)))

/** The flood's own client: one keep-alive connection per loop. */
const keepAlive = new Agent({ keepAlive: true, maxSockets: CONCURRENCY })

/** A TCP server that accepts every connection, reads and discards what arrives, and never answers. */
async function startSilentReceiver (): Promise<{ port: number, open: () => number, accepted: () => number, close: () => Promise<void> }> {
  const sockets = new Set<Socket>()
  let accepted = 0
  const server = createServer(socket => {
    accepted++
    sockets.add(socket)
    socket.on('error', () => {})
    socket.on('close', () => sockets.delete(socket))
    socket.resume()
  })
  // a large backlog (the kernel caps it at net.core.somaxconn) keeps the sidecar's connects from stalling in SYN retries
  await new Promise<void>(resolve => server.listen({ port: 0, host: '127.0.0.1', backlog: 4096 }, resolve))
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('receiver: no port')
  const close = async (): Promise<void> => {
    for (const socket of sockets) socket.destroy()
    await new Promise(resolve => server.close(resolve))
  }
  return { port: address.port, open: () => sockets.size, accepted: () => accepted, close }
}

function post (url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, agent: keepAlive }, res => {
      res.resume()
      res.on('end', () => { resolve(res.statusCode ?? 0) })
    })
    req.on('error', reject)
    req.end('{"name":"flood"}')
  })
}

const openFds = (pid: number): number => { try { return readdirSync(`/proc/${pid}/fd`).length } catch { return 0 } }

/** The non-zero webhook counters from the sidecar's /metrics, as `attempts.<outcome>` / `deliveries.<result>`. */
async function webhookMetrics (adminOrigin: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {}
  for (const { name, labels, value } of await scrapeMetrics(adminOrigin)) {
    if (value === 0) continue
    if (name === 'sidecar_webhook_attempts_total') counts[`attempts.${labels.outcome ?? ''}`] = value
    if (name === 'sidecar_webhook_deliveries_total') counts[`deliveries.${labels.result ?? ''}`] = value
  }
  return counts
}

async function main (): Promise<void> {
  guardAgainstOrphans(() => {})
  const logDir = mkdtempSync(join(tmpdir(), 'app-sidecar-webhook-flood-'))
  const receiver = await startSilentReceiver()
  const appPort = await freePort()
  const port = await freePort()
  const adminPort = await freePort()
  const app = spawnChild({ name: 'app', command: process.execPath, args: ['dist/demo/example-app.js'], env: { PORT: String(appPort), HOST: '127.0.0.1' }, cwd: ROOT, logDir })
  const sidecar = spawnChild({
    name: 'sidecar',
    command: process.execPath,
    args: [isAbsolute(SIDECAR_BIN) ? SIDECAR_BIN : join(ROOT, SIDECAR_BIN)],
    env: {
      PORT: String(port), ADMIN_PORT: String(adminPort), HOST: '127.0.0.1', APP_URL: `http://127.0.0.1:${appPort}`,
      DISABLE_AUTH: 'true', LOG_LEVEL: 'error', WEBHOOK_ALLOWED_CIDRS: '127.0.0.0/8', RESPONSE_GRACE_PERIOD_SECONDS: '1',
      ...EXTRA_ENV
    },
    cwd: ROOT,
    logDir
  })
  const adminOrigin = `http://127.0.0.1:${adminPort}`
  await waitForHttp200(app, `http://127.0.0.1:${appPort}/health`)
  await waitForHttp200(sidecar, `${adminOrigin}/readyz`)

  const now = () => ({ receiverOpen: receiver.open(), fds: openFds(sidecar.pid), rssMb: rssMb(sidecar.pid) ?? 0 })
  const baseline = now()
  const peaks = { receiverOpen: 0, fds: 0, rssMb: 0 }
  const sample = (): void => { for (const [key, value] of Object.entries(now()) as Array<[keyof typeof peaks, number]>) peaks[key] = Math.max(peaks[key], value) }
  const sampler = setInterval(sample, 200)
  const hook = encodeURIComponent(`http://127.0.0.1:${receiver.port}/hook`)
  const url = `http://127.0.0.1:${port}/v4/proj/app/run?webhookEndpoint=${hook}`
  const calls = { ok: 0, other: 0, errors: 0 }
  const started = Date.now()
  const worker = async (): Promise<void> => {
    while (Date.now() - started < SECONDS * 1000) {
      try {
        if (await post(url) === 200) calls.ok++; else calls.other++
      } catch {
        calls.errors++
        await sleep(10)
      }
    }
  }
  process.stdout.write(`flooding for ${SECONDS} s with ${CONCURRENCY} loops (sidecar ${SIDECAR_BIN}${Object.keys(EXTRA_ENV).length > 0 ? `, ${process.env.FLOOD_ENV ?? ''}` : ''})\n`)
  await Promise.all(Array.from({ length: CONCURRENCY }, worker))
  keepAlive.destroy()
  sample()
  const atFloodEnd = now()
  await sleep(SETTLE_SECONDS * 1000)
  clearInterval(sampler)
  sample()
  const settled = now()
  const result = {
    seconds: SECONDS, settleSeconds: SETTLE_SECONDS, concurrency: CONCURRENCY, calls,
    receiver: { accepted: receiver.accepted(), peakOpen: peaks.receiverOpen, openAtFloodEnd: atFloodEnd.receiverOpen, openAfterSettle: settled.receiverOpen },
    sidecarFds: { baseline: baseline.fds, peak: peaks.fds, atFloodEnd: atFloodEnd.fds, afterSettle: settled.fds },
    sidecarRssMb: { baseline: baseline.rssMb, peakSampled: peaks.rssMb, peakVmHWM: peakRssMb(sidecar.pid) ?? 0, afterSettle: settled.rssMb },
    webhookMetrics: await webhookMetrics(adminOrigin)
  }
  process.stdout.write(JSON.stringify(result, null, 2) + '\n')
  await sidecar.stop(5000)
  await app.stop()
  await receiver.close()
}

main().then(() => { process.exitCode = 0 }, error => {
  killAllChildren()
  process.stderr.write(`webhook-flood: ${(error as Error).stack ?? String(error)}\n`)
  process.exitCode = 1
})
