// The idle cost of sidecars on a shared Redis: commands per second and connections, read from
// the server's own counters (INFO commandstats, CLIENT LIST) while N sidecars of one app sit idle.
// `node --import tsx bench/idle-cost.ts [sidecars=4] [seconds=60] [bin=dist/bin/app-sidecar.js]`
import { spawn, type ChildProcess } from 'node:child_process'
import { createServer } from 'node:http'
import { once } from 'node:events'
import { Redis } from 'ioredis'
import { freePort } from '../test/helpers/ports.ts'

const count = Number(process.argv[2] ?? 4)
const seconds = Number(process.argv[3] ?? 60)
const bin = process.argv[4] ?? 'dist/bin/app-sidecar.js'

const port = await freePort()
const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
const app = createServer((_req, res) => { res.end('{}') }).listen(0, '127.0.0.1')
await once(app, 'listening')
const appPort = (app.address() as { port: number }).port
const probe = new Redis(port, { lazyConnect: true, retryStrategy: () => 200 })
for (;;) { try { await probe.connect(); break } catch { await new Promise(resolve => setTimeout(resolve, 100)) } }
const sidecars: ChildProcess[] = []
for (let i = 0; i < count; i++) {
  sidecars.push(spawn(process.execPath, [bin], {
    stdio: 'ignore',
    env: { ...process.env, PORT: '0', ADMIN_PORT: '0', HOST: '127.0.0.1', DISABLE_AUTH: 'true', APP_URL: `http://127.0.0.1:${appPort}`, PROJECT_ID: 'p', APP_NAME: 'a', HOSTNAME: `idle-${i}`, RUN_STORE_URL: `redis://127.0.0.1:${port}/0` }
  }))
}
const commands = async (): Promise<Map<string, number>> => {
  const stats = new Map<string, number>()
  for (const line of (await probe.info('commandstats')).split('\n')) {
    const match = /^cmdstat_([^:]+):calls=(\d+)/.exec(line)
    if (match !== null) stats.set(match[1] as string, Number(match[2]))
  }
  return stats
}
await new Promise(resolve => setTimeout(resolve, 15_000)) // started, groups made, first beats done
const before = await commands()
await new Promise(resolve => setTimeout(resolve, seconds * 1000))
const after = await commands()
const clients = (await probe.client('LIST') as string).trim().split('\n').filter(line => line.includes('name=app-sidecar:')).length
const rows: string[] = []
let total = 0
for (const [name, calls] of after) {
  const delta = calls - (before.get(name) ?? 0) - (name === 'info' ? 1 : 0)
  if (delta <= 0) continue
  total += delta
  rows.push(`${name}=${(delta / seconds / count).toFixed(2)}`)
}
console.log(JSON.stringify({ bin, sidecars: count, seconds, commandsPerSecondPerSidecar: Number((total / seconds / count).toFixed(2)), connectionsPerSidecar: clients / count, byCommand: rows.join(' ') }))
for (const sidecar of sidecars) sidecar.kill('SIGKILL')
probe.disconnect()
redis.kill('SIGKILL')
app.close()
