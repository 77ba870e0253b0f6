import http from 'node:http'
import httpProxy from 'http-proxy'

/**
 * The bench's baseline: the thinnest useful Node reverse proxy, http-proxy with a keep-alive agent
 * to the app and nothing else (no auth, no run ids, no envelope, no logs, no metrics).
 * Run as its own process: `PORT=… TARGET_URL=http://127.0.0.1:… node --import tsx bench/bare-http-proxy.ts`
 */
const port = Number(process.env.PORT ?? 8080)
const host = process.env.HOST ?? '127.0.0.1'
const target = process.env.TARGET_URL ?? 'http://127.0.0.1:8192'

const agent = new http.Agent({ keepAlive: true })
const proxy = httpProxy.createProxyServer({ target, agent })
proxy.on('error', (_error, _req, res) => {
  if (res instanceof http.ServerResponse && !res.headersSent) {
    res.writeHead(502, { 'content-type': 'application/json' }).end('{"message":"app unreachable"}')
  } else {
    res.destroy()
  }
})

const server = http.createServer((req, res) => { proxy.web(req, res) })
server.listen(port, host, () => { process.stdout.write(`bare http-proxy on ${host}:${port} → ${target}\n`) })
process.once('SIGTERM', () => {
  server.closeAllConnections()
  agent.destroy()
  server.close(() => process.exit(0))
})
