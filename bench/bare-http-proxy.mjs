import http from 'node:http'
import httpProxy from 'http-proxy'

/**
 * The bench's baseline: the thinnest useful Node reverse proxy, http-proxy with a keep-alive agent
 * to the app and nothing else (no auth, no run ids, no envelope, no logs, no metrics). WebSocket
 * upgrades pass through too (http-proxy's `ws` pass pipes the raw sockets, as the sidecar's does).
 * Its accept queue is 4096, like the sidecar's (Node's 511 overflows with 1,000 callers connecting at once).
 * Plain JavaScript, run on bare Node like the compiled sidecar (no tsx loader in its memory or CPU):
 * `PORT=… TARGET_URL=http://127.0.0.1:… node bench/bare-http-proxy.mjs`
 */
const port = Number(process.env.PORT ?? 8080)
const host = process.env.HOST ?? '127.0.0.1'
const target = process.env.TARGET_URL ?? 'http://127.0.0.1:8192'

const agent = new http.Agent({ keepAlive: true })
const proxy = httpProxy.createProxyServer({ target, agent })
// `res` is the caller's socket when a WebSocket upgrade failed
proxy.on('error', (_error, _req, res) => {
  if (res instanceof http.ServerResponse && !res.headersSent) {
    res.writeHead(502, { 'content-type': 'application/json' }).end('{"message":"app unreachable"}')
  } else {
    res.destroy()
  }
})

const server = http.createServer((req, res) => { proxy.web(req, res) })
// upgraded sockets leave the server's connection list: kept here so that SIGTERM can end them
/** @type {Set<import('node:stream').Duplex>} */
const upgraded = new Set()
server.on('upgrade', (req, socket, head) => {
  upgraded.add(socket)
  socket.once('close', () => { upgraded.delete(socket) })
  socket.on('error', () => { socket.destroy() })
  proxy.ws(req, socket, head)
})
server.listen({ port, host, backlog: 4096 }, () => { process.stdout.write(`bare http-proxy on ${host}:${port} → ${target}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  for (const socket of upgraded) socket.destroy()
  agent.destroy()
  server.close(() => process.exit(0))
})
