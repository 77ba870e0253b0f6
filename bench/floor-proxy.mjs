import http from 'node:http'
import { Pool } from 'undici'

/**
 * The Node floor (issue 17): the thinnest correct Node reverse proxy, what every sidecar figure is
 * read against. undici's `Pool.dispatch` to the app (the sidecar's own client), the request body
 * streamed, the response relayed with backpressure, hop-by-hop headers dropped, a 502 when the
 * app cannot be reached, the app request cut when the caller leaves; no auth, run ids, envelope,
 * logs or metrics. Accept queue 4096, like the sidecar's.
 * Plain JavaScript, run on bare Node like the compiled sidecar (no tsx loader in its memory or CPU):
 * `PORT=… TARGET_URL=http://127.0.0.1:… node bench/floor-proxy.mjs`
 */
const port = Number(process.env.PORT ?? 8081)
const host = process.env.HOST ?? '127.0.0.1'
const target = process.env.TARGET_URL ?? 'http://127.0.0.1:8192'

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host'])

/** @param {import('node:http').IncomingHttpHeaders} headers */
function endToEnd (headers) {
  /** @type {Record<string, string | string[] | undefined>} */
  const out = {}
  for (const name in headers) if (!HOP_BY_HOP.has(name)) out[name] = headers[name]
  return out
}

/** An undici dispatch handler relaying the app's response to `res`. */
class Relay {
  #res
  /** @type {import('undici').Dispatcher.DispatchController | undefined} */
  #controller

  /** @param {http.ServerResponse} res */
  constructor (res) {
    this.#res = res
    res.once('close', () => { if (!res.writableFinished) this.#controller?.abort(new Error('caller gone')) })
  }

  onRequestStart (controller) { this.#controller = controller }

  onResponseStart (_controller, status, headers) {
    this.#res.writeHead(status, endToEnd(headers))
  }

  onResponseData (controller, chunk) {
    if (!this.#res.write(chunk)) {
      controller.pause()
      this.#res.once('drain', () => { controller.resume() })
    }
  }

  onResponseEnd () { this.#res.end() }

  onResponseError () {
    if (this.#res.headersSent) this.#res.destroy()
    else this.#res.writeHead(502, { 'content-type': 'application/json' }).end('{"message":"app unreachable"}')
  }
}

const pool = new Pool(target, { keepAliveTimeout: 30_000 })
const server = http.createServer((req, res) => {
  const bodyless = req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined
  pool.dispatch({ method: req.method, path: req.url, headers: endToEnd(req.headers), body: bodyless ? null : req }, new Relay(res))
})
server.listen({ port, host, backlog: 4096 }, () => { process.stdout.write(`floor proxy on ${host}:${port} → ${target}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  server.close()
  void pool.destroy()
})
