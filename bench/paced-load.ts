import http from 'node:http'
import { type LoadRequest, type Measurement, summarize } from './load.ts'
import type { BenchSettings } from './settings.ts'

/**
 * An open-loop load generator that spreads requests evenly over time (one batch per ~1 ms timer
 * tick, as many as are due), unlike autocannon's `overallRate`, which spends each connection's
 * per-second budget in one burst. Latency runs from the moment a request is written to the last
 * byte of its response, as autocannon measures it. Keep-alive connections, opened as needed
 * (`connections` in the result is the most requests that were in flight at once).
 */
export async function runPaced (request: LoadRequest, rate: number, durationSeconds: number): Promise<Measurement> {
  const url = new URL(request.url)
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 })
  const body = request.body === undefined ? undefined : Buffer.from(request.body)
  const headers = { ...request.headers, ...(body === undefined ? {} : { 'content-length': String(body.length) }) }
  const latencies = new Float64Array(Math.ceil(rate * durationSeconds) + 16)
  let count = 0
  let ok = 0
  let errors = 0
  let timeouts = 0
  let non2xx = 0
  let pending = 0
  let maxPending = 0
  const statusCodes: Record<string, number> = {}
  let allDone: () => void = () => {}
  const drained = new Promise<void>(resolve => { allDone = resolve })
  let sendingOver = false

  const finished = (): void => {
    pending--
    if (sendingOver && pending === 0) allDone()
  }

  function send (): void {
    pending++
    if (pending > maxPending) maxPending = pending
    const startedAt = performance.now()
    const req = http.request({
      host: url.hostname, port: url.port, path: url.pathname + url.search, method: request.method, headers, agent, timeout: 10_000
    }, res => {
      res.on('data', () => {})
      res.on('end', () => {
        const status = res.statusCode ?? 0
        statusCodes[status] = (statusCodes[status] ?? 0) + 1
        if (status >= 200 && status < 300) {
          ok++
          if (count < latencies.length) latencies[count++] = performance.now() - startedAt
        } else {
          non2xx++
        }
        finished()
      })
      res.on('error', () => { errors++; finished() })
    })
    req.on('timeout', () => { timeouts++; req.destroy(new Error('timeout')) })
    req.on('error', () => { errors++; finished() })
    req.end(body)
  }

  const start = performance.now()
  const end = start + durationSeconds * 1000
  let sent = 0
  await new Promise<void>(resolve => {
    const tick = (): void => {
      const now = performance.now()
      const due = Math.floor((Math.min(now, end) - start) / 1000 * rate)
      while (sent < due) { sent++; send() }
      if (now >= end) { resolve(); return }
      setTimeout(tick, 1)
    }
    tick()
  })
  const elapsedSeconds = (performance.now() - start) / 1000
  sendingOver = true
  if (pending > 0) await drained
  agent.destroy()
  return summarize(latencies.subarray(0, count), {
    ok, errors, timeouts, non2xx, statusCodes, durationSeconds: elapsedSeconds, connections: maxPending, targetRate: rate
  })
}

/** A fixed rate, evenly paced (see runPaced): the latency a caller sees at that rate without bursts. */
export async function measurePacedRate (request: LoadRequest, settings: BenchSettings): Promise<Measurement> {
  return await runPaced(request, settings.rate, settings.durationSeconds)
}
