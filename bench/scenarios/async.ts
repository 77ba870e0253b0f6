import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import { createParser } from 'eventsource-parser'
import { scrapeMetrics, sumOf } from '../../test/helpers/admin-metrics.ts'
import { ownFigure, pairRatios, type PhaseRounds, roundsOf, rps, thresholdCheck } from '../checks.ts'
import { Latencies, type Measurement, runLoad, summarize } from '../load.ts'
import type { BenchContext, Evaluation, LoadPhase, PreparedScenario, Ratio, RunningTarget, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import {
  APP_NAME, expectGreeting, GREETING_BODY, PROJECT_ID, runRequest, shareServers, startBenchServer, startExampleApp, type StartedSidecar, startSidecarProcess
} from '../targets.ts'
import { flushRedis } from '../../test/helpers/redis-server.ts'
import { findRedis } from './bench-redis.ts'

/**
 * Issue 14: async runs — submissions/s (store in memory, Redis), runs completed/s (one sidecar, two
 * sharing Redis), event lag to a reader of the events route, plain calls with RUN_STORE_URL unset
 * and set. Targets: ≥ 2,000 submissions/s with Redis, lag p99 ≤ 5 ms (memory) / ≤ 10 ms (Redis),
 * plain calls within 3%.
 */
const SUBMIT_TARGET = 2000
const LAG_MEMORY_MS = 5
const LAG_REDIS_MS = 10
const PLAIN_TOLERANCE = 0.03
/** The completion phase's app holds each run this long; each sidecar runs this many at once. */
const HOLD_MS = 20
const RUN_SLOTS = 4
/** Streams followed at once in the lag phase, and their pace at the app (40 streams × 50 events/s = 2,000 events/s). */
const LAG_STREAMS = 40
const LAG_INTERVAL_MS = 20

const expectQueued = (status: number, body: string): void => {
  if (status !== 202) throw new Error(`expected 202, got ${status}: ${body.slice(0, 200)}`)
  if (!/^\{"run_id":"[^"]+","status":"queued"\}$/.test(body)) throw new Error(`unexpected body: ${body.slice(0, 200)}`)
}

type Sidecar = StartedSidecar
const first = (sidecars: Sidecar[]): Sidecar => sidecars[0] as Sidecar
const runsUrl = (sidecar: Sidecar, path: string): string => `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/${path}`

const succeededRuns = async (sidecars: Sidecar[]): Promise<number> => {
  let total = 0
  for (const sidecar of sidecars) total += sumOf(await scrapeMetrics(sidecar.adminOrigin), 'sidecar_runs_total', { status: 'succeeded' })
  return total
}

/** Waits until no run is queued or running on any of the sidecars (the warm-up's runs ended). */
async function settled (sidecars: Sidecar[]): Promise<void> {
  for (const deadline = performance.now() + 60_000; performance.now() < deadline; await sleep(20)) {
    let busy = 0
    for (const sidecar of sidecars) {
      const samples = await scrapeMetrics(sidecar.adminOrigin)
      busy += sumOf(samples, 'sidecar_async_queued_runs') + sumOf(samples, 'sidecar_inflight_requests')
    }
    if (busy === 0) return
  }
  throw new Error('the sidecars did not settle within 60 s')
}

const nowUs = (): number => (performance.timeOrigin + performance.now()) * 1000

/**
 * Runs completed per second: `runs` async runs submitted to the first sidecar (20 at a time),
 * timed from the first submission until every sidecar's sidecar_runs_total{status="succeeded"}
 * adds up to them all. Latencies: the submissions'.
 */
async function completionPhase (sidecars: Sidecar[], runs: number, headers: Record<string, string>): Promise<Measurement> {
  await settled(sidecars)
  const before = await succeededRuns(sidecars)
  const latencies = new Latencies()
  const statusCodes: Record<string, number> = {}
  const agent = new http.Agent({ keepAlive: true, maxSockets: 20 })
  const url = new URL(runsUrl(first(sidecars), 'run?async=true'))
  const startedAt = performance.now()
  let next = 0
  const submitOne = async (): Promise<void> => {
    while (next < runs) {
      next++
      const sentAt = performance.now()
      const status = await new Promise<number>(resolve => {
        const req = http.request({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: 'POST', headers, agent }, res => {
          res.resume()
          res.once('end', () => { resolve(res.statusCode ?? 0) })
        })
        req.once('error', () => { resolve(0) })
        req.end(GREETING_BODY)
      })
      statusCodes[status] = (statusCodes[status] ?? 0) + 1
      if (status === 202) latencies.push(performance.now() - sentAt)
    }
  }
  await Promise.all(Array.from({ length: 20 }, submitOne))
  agent.destroy()
  const accepted = statusCodes[202] ?? 0
  let done = 0
  const deadline = performance.now() + 120_000
  while (performance.now() < deadline) {
    done = await succeededRuns(sidecars) - before
    if (done >= accepted) break
    await sleep(20)
  }
  const seconds = (performance.now() - startedAt) / 1000
  const measured = summarize(latencies.values.subarray(0, latencies.count), {
    ok: done, errors: 0, timeouts: 0, non2xx: runs - accepted, statusCodes, durationSeconds: seconds, connections: 20
  })
  return { ...measured, valid: measured.valid && done === accepted, extra: { runs: accepted, completed: done } }
}

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
async function lagPhase (sidecars: Sidecar[], durationSeconds: number, headers: Record<string, string>): Promise<Measurement> {
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

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app, streamApp, slowApp }, jwks, token, prepared } = await shareServers(ctx, {
    app: startExampleApp, streamApp: c => startBenchServer(c, 'stream-app'), slowApp: c => startBenchServer(c, 'slow-app', { HOLD_MS: String(HOLD_MS) })
  })
  const headers = runRequest('', token).headers
  const redis = await findRedis(ctx.settings.redisUrl)

  /**
   * A target of `count` sidecars in front of `appOrigin` (the run store in memory, or Redis, flushed
   * first); `running` makes its request (to the first) and, for the lag and completion, its phase.
   */
  const target = (id: string, label: string, phase: string, count: number, appOrigin: string, shared: boolean, env: NodeJS.ProcessEnv,
    running: (sidecars: Sidecar[]) => Pick<RunningTarget, 'request' | 'checkResponse' | 'runPhase'>): TargetDef => ({
    id,
    label,
    phases: [phase],
    ...(shared && 'skip' in redis ? { skipReason: redis.skip } : {}),
    start: async (): Promise<RunningTarget> => {
      if (shared) await flushRedis(ctx.settings.redisUrl)
      const sidecars: Sidecar[] = []
      for (let i = 0; i < count; i++) {
        sidecars.push(await startSidecarProcess(ctx, {
          appOrigin,
          jwksUrl: jwks.url,
          logLevel: 'warn',
          name: count === 1 ? id.replace('plain', 'sidecar') : `${id}-${i + 1}`,
          env: { PROJECT_ID, APP_NAME, ASYNC_QUEUE_DEPTH: '10000000', ...(shared ? { RUN_STORE_URL: ctx.settings.redisUrl } : {}), ...env }
        }))
      }
      return { ...running(sidecars), children: sidecars.map(s => s.child), stop: async () => { for (const s of sidecars) await s.child.stop() } }
    }
  })
  const submit = (sidecars: Sidecar[]) => ({ request: runRequest(first(sidecars).origin, token, '?async=true'), checkResponse: expectQueued })
  return prepared([
    // plain calls (the json-post request), the run store unset or Redis
    ...[false, true].map(shared => target(shared ? 'plain-redis' : 'plain', shared ? 'plain calls, RUN_STORE_URL=redis' : 'plain calls, no RUN_STORE_URL', 'plain', 1,
      app.origin, shared, {}, sidecars => ({ request: runRequest(first(sidecars).origin, token), checkResponse: expectGreeting }))),
    // async submissions: the store in memory, or two sidecars sharing Redis (submitted to the first)
    ...[false, true].map(shared => target(shared ? 'submit-redis' : 'submit-memory', shared ? 'async submissions, two sidecars sharing Redis' : 'async submissions, run store in memory',
      'submit', shared ? 2 : 1, app.origin, shared, {}, submit)),
    // event lag: the store in memory, or two sidecars sharing Redis (a reader on each), in front of the stream app
    ...[false, true].map(shared => target(shared ? 'lag-redis' : 'lag-memory', shared ? 'run events, two sidecars sharing Redis' : 'run events, run store in memory',
      'lag', shared ? 2 : 1, streamApp.origin, shared, {}, sidecars => ({
        request: { url: runsUrl(first(sidecars), 'stream?count=1&interval_ms=0&async=true'), method: 'GET', headers },
        checkResponse: expectQueued,
        runPhase: async (_phase, settings) => await lagPhase(sidecars, settings.durationSeconds, headers)
      }))),
    // runs completed per second: one sidecar, or two sharing Redis, each running RUN_SLOTS at once against a HOLD_MS app
    ...[1, 2].map(count => target(`fleet-${count}`, count === 1 ? 'one sidecar, Redis' : `${count} sidecars sharing Redis`, 'complete', count, slowApp.origin, true,
      { REPLICA_CONCURRENCY: String(RUN_SLOTS) }, sidecars => ({
        ...submit(sidecars),
        runPhase: async (_phase, settings) => await completionPhase(sidecars, Math.round(RUN_SLOTS * 1000 / HOLD_MS * settings.durationSeconds), headers)
      })))
  // a Redis on another machine has no pid here: its CPU is then simply not seen
  ], 'pid' in redis && Number.isInteger(redis.pid) ? { outsideProcesses: async () => ({ 'redis-server': redis.pid }) } : {})
}

function evaluate (results: TargetResult[]): Evaluation {
  const rounds = (id: string, phase: string): PhaseRounds => roundsOf(results, id, phase)
  const [plain, fleet] = [
    ...pairRatios(results, 'plain', '×', rps, [['plain-redis/plain', 'plain calls/s with RUN_STORE_URL=redis / without', 'plain-redis', 'plain']]),
    ...pairRatios(results, 'complete', '×', rps, [['fleet-2/fleet-1', 'runs completed/s, two sidecars sharing Redis / one', 'fleet-2', 'fleet-1']])
  ] as [Ratio, Ratio]
  const figure = (id: string, label: string, phase: 'submit' | 'lag'): Ratio =>
    ownFigure(id, label, phase === 'submit' ? 'req/s' : 'ms', rounds(id, phase), phase === 'submit' ? x => x.rps : x => x.p99Ms)
  const submitRedis = figure('submit-redis', '202s/s, two sidecars sharing Redis (submitted to one)', 'submit')
  const submitMemory = figure('submit-memory', '202s/s, run store in memory', 'submit')
  const lagMemory = figure('lag-memory', 'event lag p99, memory', 'lag')
  const lagRedis = figure('lag-redis', 'event lag p99, Redis (readers on both sidecars)', 'lag')
  const lagOther = ownFigure('lag-redis-other', 'event lag p99, Redis, reader on the sidecar the run was not submitted to', 'ms',
    rounds('lag-redis', 'lag'), x => x.extra?.p99OtherSidecarMs ?? NaN)
  return {
    ratios: [plain, submitMemory, submitRedis, lagMemory, lagRedis, lagOther, fleet],
    checks: [
      thresholdCheck(`≥ ${SUBMIT_TARGET.toLocaleString('en-US')} submissions/s with Redis`, submitRedis, SUBMIT_TARGET, true),
      thresholdCheck(`event lag p99 ≤ ${LAG_MEMORY_MS} ms (memory)`, lagMemory, LAG_MEMORY_MS, false),
      thresholdCheck(`event lag p99 ≤ ${LAG_REDIS_MS} ms (Redis)`, lagRedis, LAG_REDIS_MS, false),
      thresholdCheck(`plain calls with RUN_STORE_URL set ≥ ${1 - PLAIN_TOLERANCE}× without`, plain, 1 - PLAIN_TOLERANCE, true)
    ],
    notes: [`runs completed/s: each sidecar runs ${RUN_SLOTS} at once (REPLICA_CONCURRENCY) against an app holding each call ${HOLD_MS} ms, so one sidecar's ceiling is ${RUN_SLOTS * 1000 / HOLD_MS} runs/s and two sidecars' is twice that`]
  }
}

const maxLoad: LoadPhase['run'] = async (request, settings) => await runLoad(request, { connections: settings.connections, durationSeconds: settings.durationSeconds })
/** A phase measured by its targets' own `runPhase`. */
const ownPhase = (id: string, label: string, rateUnit: string): LoadPhase =>
  ({ id, label, rateUnit, run: async () => { throw new Error(`the ${id} phase runs through its target`) } })

export const asyncScenario: Scenario = {
  name: 'async',
  baselineId: 'plain',
  description: 'async runs: submissions (202) per second, runs completed per second by one sidecar and by two sharing Redis, event lag from the app to a reader of the events route, and plain calls with and without RUN_STORE_URL',
  phases: [
    { id: 'plain', label: 'plain calls, max throughput', run: maxLoad },
    { id: 'submit', label: 'async submissions, max throughput', run: maxLoad },
    { ...ownPhase('lag', `event lag, ${LAG_STREAMS} streamed runs × ${1000 / LAG_INTERVAL_MS} events/s`, 'events/s'),
      columns: [{ key: 'readers', label: 'readers' }, { key: 'p99RunnerSideMs', label: 'p99 ms, reader on the submitting sidecar', digits: 2 },
        { key: 'p99OtherSidecarMs', label: 'p99 ms, reader on the other', digits: 2 }] },
    { ...ownPhase('complete', 'runs completed end to end', 'runs/s'), columns: [{ key: 'runs', label: 'runs', combine: 'sum' }, { key: 'completed', label: 'completed', combine: 'sum' }] }
  ],
  method: settings =>
    `Plain calls and submissions: autocannon, ${settings.connections} connections, ${settings.durationSeconds} s, auth on (a cached token); ` +
    'each submission is a POST ?async=true of the json-post body, run at the example app by the same sidecars meanwhile (ASYNC_QUEUE_DEPTH raised so none is refused). ' +
    `Event lag: ${LAG_STREAMS} async runs of the stream app (NDJSON, one line every ${LAG_INTERVAL_MS} ms for the phase, each stamped with its write time), ` +
    'each followed by one reader of its events route per sidecar; lag = arrival at the reader − the app\'s write (one clock). ' +
    `Runs completed: ${RUN_SLOTS * 1000 / HOLD_MS} runs × phase seconds submitted to the first sidecar (20 at a time), timed until the sidecars' ` +
    'sidecar_runs_total{status="succeeded"} account for all. Redis: BENCH_REDIS_URL (default redis://127.0.0.1:6379/11, flushed before each target).',
  prepare,
  evaluate,
  // the targets measured by their own phase would queue far more runs than they finish from a
  // full autocannon warm-up: they get a hundred requests, one at a time
  warmUp: async (target, settings) => {
    if (target.runPhase === undefined) return await runLoad(target.request, { connections: settings.connections, durationSeconds: settings.warmupSeconds })
    const { url, method, headers, body } = target.request
    for (let i = 0; i < 100; i++) {
      const response = await fetch(url, { method, headers, ...(body === undefined ? {} : { body }) })
      target.checkResponse(response.status, await response.text())
    }
    return undefined
  }
}
