import { createServer } from 'node:http'
import { countSpans } from '../test/helpers/otlp-protobuf.ts'

/**
 * The tracing scenario's collector: takes OTLP/HTTP exports (protobuf or JSON), reads each whole
 * and counts its spans (the protobuf one's message structure walked, not every span decoded),
 * answers 200. Run as its own process:
 * `PORT=… node --import tsx bench/otlp-receiver.ts`
 *
 *   POST /v1/traces  an export: 200 `{}`
 *   GET  /stats      {"exports", "spans"} since the last reset
 *   POST /reset      forgets everything
 *   GET  /health     200
 */
const port = Number(process.env.PORT ?? 4318)
const host = process.env.HOST ?? '127.0.0.1'
let exports = 0
let spans = 0

interface Export { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: unknown[] }> }> }

createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => chunks.push(chunk))
  req.on('end', () => {
    if (req.method === 'POST' && req.url === '/v1/traces') {
      const raw = Buffer.concat(chunks)
      exports++
      if (req.headers['content-type'] === 'application/x-protobuf') spans += countSpans(raw)
      else {
        const body = JSON.parse(raw.toString('utf8')) as Export
        for (const resource of body.resourceSpans ?? []) for (const scope of resource.scopeSpans ?? []) spans += scope.spans?.length ?? 0
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    } else if (req.url === '/stats') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ exports, spans }))
    } else if (req.method === 'POST' && req.url === '/reset') {
      exports = 0
      spans = 0
      res.writeHead(204).end()
    } else {
      res.writeHead(req.url === '/health' ? 200 : 404).end()
    }
  })
}).listen(port, host)
