import { createServer, type ServerResponse } from 'node:http'

/**
 * The large-body scenario's app: big JSON answers, so the bench can watch what holding a body
 * costs a proxy in memory. Run as its own process: `PORT=… node --import tsx bench/large-body-app.ts`
 *
 *   GET /body?bytes=N  200, `{"data":"xxx…"}` of exactly N bytes (N ≥ 11), Content-Length set;
 *                      built once per size and kept, written in 64 KiB pieces as the socket takes them
 *   GET /health        200
 */
const port = Number(process.env.PORT ?? 8196)
const host = process.env.HOST ?? '127.0.0.1'
const PIECE_BYTES = 64 * 1024
const HEAD = '{"data":"'
const TAIL = '"}'
const MAX_BYTES = 1e9

const bodies = new Map<number, Buffer>()

function bodyOf (bytes: number): Buffer {
  let body = bodies.get(bytes)
  if (body === undefined) {
    body = Buffer.alloc(bytes, 'x')
    body.write(HEAD, 0)
    body.write(TAIL, bytes - TAIL.length)
    bodies.set(bytes, body)
  }
  return body
}

/** Resolves when the socket takes more, or when the response is gone (a caller that left). */
const drained = async (res: ServerResponse): Promise<void> => await new Promise(resolve => {
  const done = (): void => { res.off('drain', done); res.off('close', done); resolve() }
  res.on('drain', done)
  res.on('close', done)
})

async function send (res: ServerResponse, body: Buffer): Promise<void> {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
  for (let offset = 0; offset < body.length; offset += PIECE_BYTES) {
    if (res.destroyed) return
    if (!res.write(body.subarray(offset, offset + PIECE_BYTES))) await drained(res)
  }
  res.end()
}

const server = createServer((req, res) => {
  const url = new URL(req.url ?? '/', 'http://app')
  req.resume()
  if (url.pathname === '/body') {
    const bytes = Number(url.searchParams.get('bytes'))
    if (!Number.isInteger(bytes) || bytes < HEAD.length + TAIL.length || bytes > MAX_BYTES) {
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"message":"bytes: an integer from 11 to 10^9"}')
      return
    }
    void send(res, bodyOf(bytes))
    return
  }
  if (url.pathname === '/health') {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"ok"}')
    return
  }
  res.writeHead(404, { 'content-type': 'application/json' }).end('{"message":"not found"}')
})
server.listen(port, host, () => { process.stdout.write(`large-body app on ${host}:${port}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  server.close(() => process.exit(0))
})
