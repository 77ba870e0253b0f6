import http from 'node:http'
import { createParser } from 'eventsource-parser'
import { Latencies, type Measurement, summarize } from '../load.ts'
import { first, nowUs, runsUrl, type Sidecar } from './async-runs.ts'

/** Streams followed at once in the lag phase, and their pace at the app (40 streams × 50 events/s = 2,000 events/s). */
export const LAG_STREAMS = 40
export const LAG_INTERVAL_MS = 20

/** One followed run's reader: each event's lag (arrival here − the app's write), -1 events on a gap or error. */
function follow (eventsUrl: string, headers: Record<string, string>, latencies: Latencies): Promise<{ events: number, failed: boolean }> {
  return new Promise(resolve => {
    const outcome = { events: 0, failed: false }
    let next = 0
    let receivedAt = 0
    const req = http.get(eventsUrl, { headers: { ...headers, accept: 'text/event-stream' } }, res => {
      if (res.statusCode !== 200) { outcome.failed = true; res.resume(); res.once('end', () => { resolve(outcome) }); return }
      res.setEncoding('utf8')
      const parser = createParser({
        onEvent: event => {
          if (event.event === 'done') return
          if (event.event === 'error') { outcome.failed = true; return }
          const value = JSON.parse(event.data) as { i: number, t: number }
          if (value.i !== next) outcome.failed = true
          next = value.i + 1
          outcome.events++
          latencies.push((receivedAt - value.t) / 1000)
        }
      })
      res.on('data', (chunk: string) => { receivedAt = nowUs(); parser.feed(chunk) })
      res.once('end', () => { resolve(outcome) })
      res.once('error', () => { outcome.failed = true; resolve(outcome) })
    })
    req.once('error', () => { outcome.failed = true; resolve(outcome) })
  })
}

/**
 * Event lag: LAG_STREAMS async runs of the stream app (NDJSON, each line stamped with its write
 * time), submitted to the first sidecar and each followed from its first event by a reader on
 * every sidecar given. Latencies: every event's lag; extra: the p99 per reader's sidecar.
 */
export async function lagPhase (sidecars: Sidecar[], durationSeconds: number, headers: Record<string, string>): Promise<Measurement> {
  const all = new Latencies()
  const perSidecar = sidecars.map(() => new Latencies())
  const startedAt = performance.now()
  const followers: Array<Promise<{ events: number, failed: boolean }>> = []
  let rejected = 0
  for (let i = 0; i < LAG_STREAMS; i++) {
    const submitted = await fetch(runsUrl(first(sidecars), `stream?interval_ms=${LAG_INTERVAL_MS}&duration_ms=${durationSeconds * 1000}&async=true`), { headers })
    if (submitted.status !== 202) { rejected++; continue }
    const { run_id: runId } = await submitted.json() as { run_id: string }
    sidecars.forEach((sidecar, s) => {
      const latencies = perSidecar[s] as Latencies
      const both = { push: (v: number) => { latencies.push(v); all.push(v) } } as unknown as Latencies
      followers.push(follow(runsUrl(sidecar, `_runs/${runId}/events`), headers, both))
    })
  }
  const outcomes = await Promise.all(followers)
  const seconds = (performance.now() - startedAt) / 1000
  const p99 = (l: Latencies): number => summarize(l.values.subarray(0, l.count), { ok: l.count, errors: 0, timeouts: 0, non2xx: 0, statusCodes: {}, durationSeconds: 1, connections: 1 }).p99Ms
  const events = outcomes.reduce((sum, o) => sum + o.events, 0)
  const measured = summarize(all.values.subarray(0, all.count), {
    ok: events, errors: outcomes.filter(o => o.failed).length, timeouts: 0, non2xx: rejected, statusCodes: { 202: LAG_STREAMS - rejected }, durationSeconds: seconds, connections: followers.length
  })
  const extra: Record<string, number> = { readers: followers.length, eventsPerReader: events / Math.max(1, followers.length), p99RunnerSideMs: p99(perSidecar[0] as Latencies) }
  if (sidecars.length > 1) extra.p99OtherSidecarMs = p99(perSidecar[1] as Latencies)
  return { ...measured, extra }
}
