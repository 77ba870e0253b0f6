import http from 'node:http'
import { createParser } from 'eventsource-parser'
import { Latencies, type LoadRequest, type Measurement, summarize } from './load.ts'

/**
 * The streaming load generator: `streams` concurrent requests to a bench/stream-app.ts stream
 * (directly, or through a proxy), each lasting `durationSeconds`, and every event's latency: the
 * arrival here of the chunk that carried it minus the send time the app wrote into it (`"t"`, epoch
 * µs; both processes read one clock). The framing follows the Content-Type: NDJSON lines (the app,
 * nginx) or server-sent events (the sidecar). A gap in the events' indexes or an `event: error`
 * makes the measurement invalid.
 */
export interface StreamLoadOptions {
  readonly streams: number
  readonly durationSeconds: number
  /** Each stream's pace at the app; 0: as fast as it goes. */
  readonly intervalMs: number
}

/** What one stream saw. */
interface StreamOutcome { status: number, events: number, lost: number, failed: boolean }

function openStream (url: URL, request: LoadRequest, agent: http.Agent, latencies: Latencies): Promise<StreamOutcome> {
  return new Promise(resolve => {
    const outcome: StreamOutcome = { status: 0, events: 0, lost: 0, failed: false }
    let next = 0
    let receivedAt = 0
    let settled = false
    const done = (failed: boolean): void => { if (!settled) { settled = true; outcome.failed ||= failed; resolve(outcome) } }
    const onData = (data: string): void => {
      let event: { i?: unknown, t?: unknown } | undefined
      try { event = JSON.parse(data) as typeof event } catch {}
      if (typeof event?.i !== 'number' || typeof event.t !== 'number') { outcome.failed = true; return }
      outcome.lost += Math.abs(event.i - next)
      next = event.i + 1
      outcome.events++
      latencies.push((receivedAt - event.t) / 1000)
    }
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: request.method, headers: request.headers, agent, timeout: 10_000 }, res => {
      outcome.status = res.statusCode ?? 0
      if (outcome.status !== 200) { res.resume(); res.once('end', () => { done(false) }); return }
      res.setEncoding('utf8')
      const sse = (res.headers['content-type'] ?? '').startsWith('text/event-stream')
      const parser = createParser({ onEvent: event => { if (event.event === 'error') outcome.failed = true; else onData(event.data) } })
      let pending = ''
      res.on('data', (chunk: string) => {
        receivedAt = (performance.timeOrigin + performance.now()) * 1000
        if (sse) { parser.feed(chunk); return }
        const lines = (pending + chunk).split('\n')
        pending = lines.pop() as string
        for (const line of lines) if (line !== '') onData(line)
      })
      res.once('end', () => { done(pending.trim() !== '') })
      res.once('error', () => { done(true) })
      res.once('aborted', () => { done(true) })
    })
    req.once('timeout', () => { req.destroy(new Error('timeout')) })
    req.once('error', () => { done(true) })
    req.end()
  })
}

/** Runs the streams; `rps` is events per second over the whole run, latencies are per event. */
export async function runStreams (request: LoadRequest, options: StreamLoadOptions): Promise<Measurement> {
  const url = new URL(request.url)
  url.searchParams.set('interval_ms', String(options.intervalMs))
  url.searchParams.set('duration_ms', String(Math.round(options.durationSeconds * 1000)))
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity })
  const latencies = new Latencies()
  const startedAt = performance.now()
  const outcomes = await Promise.all(Array.from({ length: options.streams }, async () => await openStream(url, request, agent, latencies)))
  const elapsedSeconds = (performance.now() - startedAt) / 1000
  agent.destroy()
  const statusCodes: Record<string, number> = {}
  for (const o of outcomes) statusCodes[o.status] = (statusCodes[o.status] ?? 0) + 1
  const events = outcomes.reduce((total, o) => total + o.events, 0)
  const lost = outcomes.reduce((total, o) => total + o.lost, 0)
  const measured = summarize(latencies, {
    ok: events,
    errors: outcomes.filter(o => o.failed).length,
    timeouts: 0,
    non2xx: outcomes.filter(o => o.status !== 200 && o.status !== 0).length,
    statusCodes,
    durationSeconds: elapsedSeconds,
    connections: options.streams
  })
  return { ...measured, valid: measured.valid && lost === 0, extra: { eventsPerStream: events / options.streams, lostEvents: lost } }
}
