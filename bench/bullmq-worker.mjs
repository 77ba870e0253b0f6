import http from 'node:http'
import { Worker } from 'bullmq'
import { Pool } from 'undici'

/**
 * A worker of the BullMQ peer (the async scenario's `bullmq` target, issue 39): one process, one
 * BullMQ Worker running CONCURRENCY jobs at once. Each job's data is the request a sidecar would
 * run ({method, path, headers, body}); the processor sends it to the app with undici (a Pool as the
 * sidecar's own) and returns the app's body, which BullMQ keeps as the job's result. A non-2xx
 * answer fails the job.
 * `GET /stats` {"completed", "failed", "active"}: counted here, so the bench learns that jobs ended
 * without sending the Redis a command of its own. `GET /health`: 200 once the Worker is connected.
 * Plain JavaScript on bare Node, like the compiled sidecar:
 * `PORT=… REDIS_URL=… QUEUE_NAME=… APP_URL=… CONCURRENCY=2 node bench/bullmq-worker.mjs`
 */
const port = Number(process.env.PORT)
const host = process.env.HOST ?? '127.0.0.1'
const app = new Pool(process.env.APP_URL ?? 'http://127.0.0.1:8192', { keepAliveTimeout: 30_000, headersTimeout: 0, bodyTimeout: 0 })
let [completed, failed, active] = [0, 0, 0]

/** @param {import('bullmq').Job<{ method: string, path: string, headers: Record<string, string>, body: string }>} job */
async function processor (job) {
  active++
  try {
    const { method, path, headers, body } = job.data
    const response = await app.request({ method, path, headers, body })
    const text = await response.body.text()
    if (response.statusCode < 200 || response.statusCode > 299) throw new Error(`the app answered ${response.statusCode}`)
    return text
  } finally {
    active--
  }
}

const worker = new Worker(process.env.QUEUE_NAME ?? 'bench-runs', processor, {
  connection: { url: process.env.REDIS_URL, maxRetriesPerRequest: null },
  concurrency: Number(process.env.CONCURRENCY ?? 2)
})
worker.on('completed', () => { completed++ })
worker.on('failed', () => { failed++ })
worker.on('error', error => { process.stderr.write(`bullmq worker: ${error.message}\n`) })

let ready = false
const server = http.createServer((req, res) => {
  const json = (status, body) => { res.writeHead(status, { 'content-type': 'application/json' }).end(body) }
  if (req.url === '/stats') json(200, JSON.stringify({ completed, failed, active }))
  else if (req.url === '/health') json(ready ? 200 : 503, `{"ready":${ready}}`)
  else json(404, '{"message":"not found"}')
})
server.listen(port, host)
await worker.waitUntilReady()
ready = true
process.stdout.write(`bullmq worker on ${host}:${port}, concurrency ${worker.opts.concurrency}\n`)

process.once('SIGTERM', () => {
  server.close()
  // the jobs in progress end first (Worker.close waits for them)
  worker.close().then(() => app.destroy()).finally(() => { process.exit(0) })
})
