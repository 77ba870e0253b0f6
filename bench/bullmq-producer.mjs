import http from 'node:http'
import { Queue } from 'bullmq'

/**
 * The producer of the BullMQ peer (the async scenario's `bullmq` target, issue 39): the bench
 * submits to it over HTTP as it submits to a sidecar, so the two are loaded the same way and its
 * CPU counts as the target's. `POST /run` (any body): `Queue.add('run', <the request a sidecar
 * would run: {method, path, headers, body}>, finished jobs kept an hour)`, then 202
 * {"job_id", "status": "queued"} once the add resolved (503 when it failed); nothing else (no auth).
 * `GET /stats` {"added"}; `GET /health`: 200 once the Queue is connected. One Queue, one Redis
 * connection, open as long as the process.
 * Plain JavaScript on bare Node, like the compiled sidecar:
 * `PORT=… REDIS_URL=… QUEUE_NAME=… node bench/bullmq-producer.mjs`
 */
const port = Number(process.env.PORT)
const host = process.env.HOST ?? '127.0.0.1'
/** As the sidecar keeps a finished run (RUN_RETENTION_SECONDS, default an hour). */
const KEEP_AN_HOUR = { removeOnComplete: { age: 3600 }, removeOnFail: { age: 3600 } }

const queue = new Queue(process.env.QUEUE_NAME ?? 'bench-runs', { connection: { url: process.env.REDIS_URL } })
queue.on('error', error => { process.stderr.write(`bullmq producer: ${error.message}\n`) })
let added = 0
let ready = false

/** @param {http.IncomingMessage} req @param {http.ServerResponse} res */
function submit (req, res) {
  const chunks = []
  req.on('data', chunk => { chunks.push(chunk) })
  req.once('end', () => {
    // the app's path and content type, as a sidecar forwards them (`?async=true` is the sidecar's own)
    const request = { method: 'POST', path: '/run', headers: { 'content-type': req.headers['content-type'] ?? 'application/json' }, body: Buffer.concat(chunks).toString('utf8') }
    queue.add('run', request, KEEP_AN_HOUR).then(job => {
      added++
      res.writeHead(202, { 'content-type': 'application/json' }).end(JSON.stringify({ job_id: job.id, status: 'queued' }))
    }, error => {
      res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ message: error.message }))
    })
  })
}

const server = http.createServer((req, res) => {
  const json = (status, body) => { res.writeHead(status, { 'content-type': 'application/json' }).end(body) }
  if (req.method === 'POST' && req.url === '/run') submit(req, res)
  else if (req.url === '/stats') json(200, JSON.stringify({ added }))
  else if (req.url === '/health') json(ready ? 200 : 503, `{"ready":${ready}}`)
  else json(404, '{"message":"not found"}')
})
server.listen({ port, host, backlog: 4096 })
await queue.waitUntilReady()
ready = true
process.stdout.write(`bullmq producer on ${host}:${port}\n`)

process.once('SIGTERM', () => {
  server.closeAllConnections()
  server.close()
  queue.close().finally(() => { process.exit(0) })
})
