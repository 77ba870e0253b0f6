import http from 'node:http'
import { eachTick, Latencies, type LoadRequest, type Measurement, summarize } from './load.ts'
import type { BenchSettings } from './settings.ts'

/**
 * An open-loop generator that spreads requests evenly over time (each ~1 ms tick sends what is
 * due), unlike autocannon's `overallRate`, which spends each connection's per-second budget in one
 * burst. Latency runs from the write of a request to the last byte of its response, as autocannon
 * measures it. Keep-alive connections, opened as needed (`connections` in the result: the most
 * requests in flight at once). `bodyOf`: each request's own body (made as it is sent), instead of the request's.
 */
export async function runPaced (request: LoadRequest, rate: number, durationSeconds: number, bodyOf?: () => string): Promise<Measurement> {
  const url = new URL(request.url)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 })
  const fixedBody = request.body === undefined ? undefined : Buffer.from(request.body)
  const headers = { ...request.headers, ...(fixedBody === undefined || bodyOf !== undefined ? {} : { 'content-length': String(fixedBody.length) }) }
  const options = { host: url.hostname, port: url.port, path: url.pathname + url.search, method: request.method, headers, agent, timeout: 10_000 }
  const latencies = new Latencies()
  const statusCodes: Record<string, number> = {}
  const inFlight: Array<Promise<void>> = []
  let [ok, errors, timeouts, non2xx, pending, maxPending] = [0, 0, 0, 0, 0, 0]

  const send = (): Promise<void> => new Promise(resolve => {
    maxPending = Math.max(maxPending, ++pending)
    const startedAt = performance.now()
    const failed = (): void => { errors++; pending--; resolve() }
    const body = bodyOf === undefined ? fixedBody : Buffer.from(bodyOf())
    const req = http.request(bodyOf === undefined ? options : { ...options, headers: { ...headers, 'content-length': String(body?.length ?? 0) } }, res => {
      res.resume()
      res.on('end', () => {
        const status = res.statusCode ?? 0
        statusCodes[status] = (statusCodes[status] ?? 0) + 1
        if (status >= 200 && status < 300) { ok++; latencies.push(performance.now() - startedAt) } else non2xx++
        pending--
        resolve()
      })
      res.on('error', failed)
    })
    req.on('timeout', () => { timeouts++; req.destroy(new Error('timeout')) })
    req.on('error', failed)
    req.end(body)
  })

  const startedAt = performance.now()
  await eachTick(durationSeconds, elapsedMs => {
    for (let due = Math.floor(elapsedMs / 1000 * rate); inFlight.length < due;) inFlight.push(send())
  })
  const elapsedSeconds = (performance.now() - startedAt) / 1000
  await Promise.all(inFlight)
  agent.destroy()
  return summarize(latencies, { ok, errors, timeouts, non2xx, statusCodes, durationSeconds: elapsedSeconds, connections: maxPending, targetRate: rate })
}

/** A fixed rate, evenly paced (see runPaced): the latency a caller sees at that rate without bursts. */
export async function measurePacedRate (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runPaced(request, settings.rate, settings.durationSeconds)
}
