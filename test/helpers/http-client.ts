import { request, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http'
import { connect } from 'node:net'

export interface SentResponse {
  status: number
  headers: IncomingHttpHeaders
  body: Buffer
  text: string
  json: () => unknown
}

/** One HTTP request with node:http (no header filtering, no pooling); `body` may be a list of chunks (sent chunked). */
export function send (url: string, options: { method?: string, headers?: OutgoingHttpHeaders, body?: string | Buffer | Array<string | Buffer> } = {}): Promise<SentResponse> {
  return new Promise((resolve, reject) => {
    const { origin, hostname, port } = new URL(url)
    // the raw path, not normalised (`..` and `%2F` stay as written)
    const path = url.slice(origin.length) || '/'
    const req = request({ hostname, port, path, method: options.method ?? 'GET', headers: options.headers, agent: false }, res => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('error', reject)
      res.on('end', () => {
        const body = Buffer.concat(chunks)
        const text = body.toString('utf8')
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body, text, json: () => JSON.parse(text) })
      })
    })
    req.on('error', reject)
    if (Array.isArray(options.body)) {
      for (const chunk of options.body) req.write(chunk)
      req.end()
    } else {
      req.end(options.body)
    }
  })
}

/** Writes raw bytes to host:port and collects everything read until the peer closes (or `ms`). */
export function sendRaw (port: number, bytes: string | Buffer, ms = 3000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    const chunks: Buffer[] = []
    const timer = setTimeout(() => { socket.destroy(); resolve(Buffer.concat(chunks).toString('latin1')) }, ms)
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.on('error', reject)
    socket.on('close', () => { clearTimeout(timer); resolve(Buffer.concat(chunks).toString('latin1')) })
    socket.write(bytes)
  })
}
