import { cpus } from 'node:os'
import { atMost, builds, ownFigure, pairRatios, type PhaseRounds, rateNotReached, roundsOf, rps, thresholdCheck } from '../checks.ts'
import { runLoad } from '../load.ts'
import type { BenchContext, Check, Evaluation, LoadPhase, PreparedScenario, Ratio, RunningTarget, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import { APP_NAME, expectGreeting, PROJECT_ID, runRequest, shareServers, startBenchServer, startExampleApp, startSidecarProcess } from '../targets.ts'
import { againstBullmq } from './async-bullmq-checks.ts'
import { BULLMQ_VERSION, CONCURRENCY, expectJobQueued, startBullmqPeer, WORKERS } from './async-bullmq.ts'
import { commandList, commandsPhase } from './async-commands.ts'
import { LAG_INTERVAL_MS, LAG_STREAMS, lagPhase } from './async-lag.ts'
import { completionPhase, first, type Fleet, HOLD_MS, PACED_RATE, pacedPhase, runsUrl, type Sidecar, sidecarFleet } from './async-runs.ts'
import { benchRedis } from './bench-redis.ts'

/**
 * Issues 14 and 30: async runs — submissions/s (store in memory, Redis), event lag to a reader of
 * the events route, plain calls with RUN_STORE_URL unset and set (issue 14); and, with 2 and 4
 * sidecars × 2 slots sharing one Redis in front of a 20 ms app: runs completed with a backlog and
 * the app's slot utilisation, submit → app latency below capacity, round trips and Redis commands
 * per run (issue 30); the same phases on BullMQ doing the same work on the same Redis, the sidecars
 * no worse than it (issue 39). Targets: ≥ 2,000 submissions/s with Redis, lag p99 ≤ 5 ms (memory) /
 * ≤ 10 ms (Redis), plain calls within 3%; utilisation ≥ 0.95 (≥ 0.9 on 2 cores), ≤ 4 round trips
 * and ≤ 15 commands per run, submit → app p99 ≤ 5 ms.
 */
const SUBMIT_TARGET = 2000
const LAG_MEMORY_MS = 5
const LAG_REDIS_MS = 10
const PLAIN_TOLERANCE = 0.03
/** Each fleet sidecar's REPLICA_CONCURRENCY, and the fleets' sizes. */
const SLOTS_EACH = 2
const FLEETS = [2, 4] as const
const TWO_CORES = cpus().length <= 2
const UTILISATION_TARGET = TWO_CORES ? 0.9 : 0.95
const ROUND_TRIPS_TARGET = 4
const COMMANDS_TARGET = 15
const SUBMIT_TO_APP_MS = 5
/** The phases of fleet-2 and of its BullMQ peer. */
const FLEET_2_PHASES = ['complete', 'paced', 'commands', 'commands-backlog', 'commands-one']
/** Issue 39: Redis commands per run with a backlog. */
const BACKLOG_COMMANDS_TARGET = 30

const expectQueued = (status: number, body: string): void => {
  if (status !== 202) throw new Error(`expected 202, got ${status}: ${body.slice(0, 200)}`)
  if (!/^\{"run_id":"[^"]+","status":"queued"\}$/.test(body)) throw new Error(`unexpected body: ${body.slice(0, 200)}`)
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app, streamApp, slowApp }, jwks, token, prepared } = await shareServers(ctx, {
    app: startExampleApp, streamApp: c => startBenchServer(c, 'stream-app'), slowApp: c => startBenchServer(c, 'slow-app', { HOLD_MS: String(HOLD_MS) })
  })
  const headers = runRequest('', token).headers
  const redis = await benchRedis(ctx)
  const store = 'skip' in redis ? undefined : redis
  /** A fleet's own phases: with a backlog, paced, and its Redis traffic. */
  const fleetPhases = (fleet: Fleet): RunningTarget['runPhase'] => async (phase, settings) => {
    if (phase.id === 'paced') return await pacedPhase(fleet, settings.durationSeconds, store)
    if (phase.id === 'commands' && store !== undefined) return await commandsPhase(fleet, store, settings.durationSeconds)
    if (phase.id === 'commands-backlog' && store !== undefined) return await commandsPhase(fleet, store, settings.durationSeconds, 'backlog')
    if (phase.id === 'commands-one' && store !== undefined) return await commandsPhase(fleet, store, settings.durationSeconds, 'one')
    return await completionPhase(fleet, settings.durationSeconds)
  }

  /**
   * A target of `count` sidecars in front of `appOrigin` (the run store in memory, or the shared
   * Redis, flushed first); `running` makes its request (to the first) and, for the lag and the
   * fleets, its phases. `start(bin)`: on another build (BENCH_BEFORE_BIN).
   */
  const target = (id: string, label: string, phases: string[], count: number, appOrigin: string, shared: boolean, env: NodeJS.ProcessEnv,
    running: (sidecars: Sidecar[]) => Pick<RunningTarget, 'request' | 'checkResponse' | 'runPhase'>): TargetDef => ({
    id,
    label,
    phases,
    ...(shared && 'skip' in redis ? { skipReason: redis.skip } : {}),
    start: async (bin?: string): Promise<RunningTarget> => {
      if (shared && !('skip' in redis)) await redis.flush()
      const sidecars: Sidecar[] = []
      for (let i = 0; i < count; i++) {
        sidecars.push(await startSidecarProcess(ctx, {
          appOrigin,
          jwksUrl: jwks.url,
          logLevel: 'warn',
          name: count === 1 ? id.replace('plain', 'sidecar') : `${id}-${i + 1}`,
          bin,
          env: { PROJECT_ID, APP_NAME, ASYNC_QUEUE_DEPTH: '10000000', ...(shared && !('skip' in redis) ? { RUN_STORE_URL: redis.url } : {}), ...env }
        }))
      }
      return { ...running(sidecars), children: sidecars.map(s => s.child), stop: async () => { for (const s of sidecars) await s.child.stop() } }
    }
  })
  const submit = (sidecars: Sidecar[]) => ({ request: runRequest(first(sidecars).origin, token, '?async=true'), checkResponse: expectQueued })
  const scenario = prepared([
    // plain calls (the json-post request), the run store unset or Redis
    ...[false, true].map(shared => target(shared ? 'plain-redis' : 'plain', shared ? 'plain calls, RUN_STORE_URL=redis' : 'plain calls, no RUN_STORE_URL', ['plain'], 1,
      app.origin, shared, {}, sidecars => ({ request: runRequest(first(sidecars).origin, token), checkResponse: expectGreeting }))),
    // async submissions: the store in memory, or two sidecars sharing Redis (submitted to the first)
    ...[false, true].map(shared => target(shared ? 'submit-redis' : 'submit-memory', shared ? 'async submissions, two sidecars sharing Redis' : 'async submissions, run store in memory',
      ['submit'], shared ? 2 : 1, app.origin, shared, {}, submit)),
    // event lag: the store in memory, or two sidecars sharing Redis (a reader on each), in front of the stream app
    ...[false, true].map(shared => target(shared ? 'lag-redis' : 'lag-memory', shared ? 'run events, two sidecars sharing Redis' : 'run events, run store in memory',
      ['lag'], shared ? 2 : 1, streamApp.origin, shared, {}, sidecars => ({
        request: { url: runsUrl(first(sidecars), 'stream?count=1&interval_ms=0&async=true'), method: 'GET', headers },
        checkResponse: expectQueued,
        runPhase: async (_phase, settings) => await lagPhase(sidecars, settings.durationSeconds, headers)
      }))),
    // fleets of SLOTS_EACH-slot sidecars sharing Redis in front of the slow app: runs with a backlog (utilisation at the app);
    // the 2-sidecar one also paced (submit → app) and counted at the Redis (commands per run)
    ...FLEETS.map(count => target(`fleet-${count}`, `${count} sidecars × ${SLOTS_EACH} slots sharing Redis`, count === 2 ? FLEET_2_PHASES : ['complete'],
      count, slowApp.origin, true, { REPLICA_CONCURRENCY: String(SLOTS_EACH) },
      sidecars => ({ ...submit(sidecars), runPhase: fleetPhases(sidecarFleet(sidecars, SLOTS_EACH, slowApp, submit(sidecars).request)) }))),
    // issue 39: BullMQ doing fleet-2's work on the same Redis (flushed first), in the same phases
    {
      id: 'bullmq',
      label: `BullMQ ${BULLMQ_VERSION}, ${WORKERS} worker processes × concurrency ${CONCURRENCY} (and a producer process)`,
      phases: FLEET_2_PHASES,
      ...('skip' in redis ? { skipReason: redis.skip } : {}),
      start: async (): Promise<RunningTarget> => {
        if (store === undefined) throw new Error('no Redis')
        await store.flush()
        const peer = await startBullmqPeer(ctx, store, slowApp)
        return { request: peer.fleet.submit, checkResponse: expectJobQueued, runPhase: fleetPhases(peer.fleet), children: peer.children, stop: peer.stop }
      }
    }
  ])
  return 'skip' in redis ? scenario : redis.prepared(scenario)
}

function evaluate (results: TargetResult[]): Evaluation {
  const rounds = (id: string, phase: string): PhaseRounds => roundsOf(results, id, phase)
  const [plain] = pairRatios(results, 'plain', '×', rps, [['plain-redis/plain', 'plain calls/s with RUN_STORE_URL=redis / without', 'plain-redis', 'plain']]) as [Ratio]
  const figure = (id: string, label: string, phase: 'submit' | 'lag'): Ratio =>
    ownFigure(id, label, phase === 'submit' ? 'req/s' : 'ms', rounds(id, phase), phase === 'submit' ? x => x.rps : x => x.p99Ms)
  const submitRedis = figure('submit-redis', '202s/s, two sidecars sharing Redis (submitted to one)', 'submit')
  const submitMemory = figure('submit-memory', '202s/s, run store in memory', 'submit')
  const lagMemory = figure('lag-memory', 'event lag p99, memory', 'lag')
  const [lagRedis, ...lagRedisBefore] = builds(results, 'lag-redis').map(b => figure(`lag-redis${b.suffix}`, `event lag p99, Redis (readers on both sidecars)${b.label}`, 'lag')) as [Ratio, ...Ratio[]]
  const lagOther = ownFigure('lag-redis-other', 'event lag p99, Redis, reader on the sidecar the run was not submitted to', 'ms',
    rounds('lag-redis', 'lag'), x => x.extra?.p99OtherSidecarMs ?? NaN)

  // issue 30, for this build and (BENCH_BEFORE_BIN) the older one
  const fleet = (count: number, suffix: string, label: string): Ratio[] => [
    ownFigure(`utilisation-${count}${suffix}`, `slot utilisation with a backlog, ${count} sidecars × ${SLOTS_EACH} slots (∫ in-flight dt at the app ÷ slots × span)${label}`, '%',
      rounds(`fleet-${count}${suffix}`, 'complete'), x => x.extra?.utilisation ?? NaN),
    ownFigure(`runs-${count}${suffix}`, `runs completed/s, ${count} sidecars × ${SLOTS_EACH} slots (first submission → last end)${label}`, 'req/s', rounds(`fleet-${count}${suffix}`, 'complete'), x => x.rps)
  ]
  const perRun = (suffix: string, label: string): Ratio[] => ([
    ['round-trips', 'round trips per async run (MONITOR batches: one client\'s commands each within 50 µs)', 'roundTripsPerRun'],
    ['commands', 'Redis commands per async run (INFO commandstats, those scripts ran included)', 'commandsPerRun'],
    ['client-commands', 'client commands per async run (MONITOR lines from the sidecars)', 'clientCommandsPerRun'],
    ['script-calls', 'script calls per async run (EVALSHA/EVAL from the sidecars)', 'scriptCallsPerRun'],
    ['lua-commands', 'commands run inside scripts per async run (MONITOR lines from lua)', 'luaCommandsPerRun']
  ] as const).map(([id, text, key]) => ownFigure(`${id}${suffix}`, `${text}${label}`, '/run', rounds(`fleet-2${suffix}`, 'commands'), x => x.extra?.[key] ?? NaN))
  const submitToApp = (suffix: string, label: string): Ratio => ownFigure(`submit-to-app${suffix}`,
    `submit → app p99, ${PACED_RATE} runs/s paced over 2 × ${SLOTS_EACH} slots${label}`, 'ms', rounds(`fleet-2${suffix}`, 'paced'), x => x.p99Ms)
  const issue30 = builds(results, 'fleet-2').map(b => ({
    suffix: b.suffix,
    ratios: [...FLEETS.flatMap(count => fleet(count, b.suffix, b.label)), submitToApp(b.suffix, b.label), ...perRun(b.suffix, b.label)]
  }))
  const now = (id: string): Ratio => issue30[0]?.ratios.find(r => r.id === id) ?? { id, label: id, unit: '×', value: null }
  const pacedShort = rateNotReached(rounds('fleet-2', 'paced'), PACED_RATE, 'runs/s')
  const checks: Check[] = [
    thresholdCheck(`≥ ${SUBMIT_TARGET.toLocaleString('en-US')} submissions/s with Redis`, submitRedis, SUBMIT_TARGET, true),
    thresholdCheck(`event lag p99 ≤ ${LAG_MEMORY_MS} ms (memory)`, lagMemory, LAG_MEMORY_MS, false),
    thresholdCheck(`event lag p99 ≤ ${LAG_REDIS_MS} ms (Redis)`, lagRedis, LAG_REDIS_MS, false),
    thresholdCheck(`plain calls with RUN_STORE_URL set ≥ ${1 - PLAIN_TOLERANCE}× without`, plain, 1 - PLAIN_TOLERANCE, true),
    ...FLEETS.map(count => thresholdCheck(`slot utilisation with a backlog ≥ ${UTILISATION_TARGET} (${count} sidecars × ${SLOTS_EACH} slots, ${HOLD_MS} ms app${TWO_CORES ? '; 2 cores' : ''})`,
      now(`utilisation-${count}`), UTILISATION_TARGET, true)),
    atMost(`≤ ${ROUND_TRIPS_TARGET} round trips per async run`, now('round-trips'), ROUND_TRIPS_TARGET),
    atMost(`≤ ${COMMANDS_TARGET} Redis commands per async run`, now('commands'), COMMANDS_TARGET),
    atMost(`≤ ${BACKLOG_COMMANDS_TARGET} Redis commands per async run with a backlog`, ownFigure('commands-backlog', 'Redis commands per async run with a backlog (INFO commandstats, busy − idle)', '/run',
      rounds('fleet-2', 'commands-backlog'), x => x.extra?.commandsPerRun ?? NaN), BACKLOG_COMMANDS_TARGET),
    atMost(`submit → app p99 ≤ ${SUBMIT_TO_APP_MS} ms below capacity (${PACED_RATE} runs/s over 4 slots)`, now('submit-to-app'), SUBMIT_TO_APP_MS, pacedShort)
  ]
  const breakdown = builds(results, 'fleet-2').map(b => {
    const extra = results.find(r => r.id === `fleet-2${b.suffix}`)?.phases.commands?.extra
    return `Redis commands per async run by name${b.label}: sent by the sidecars ${commandList(extra, 'client.')}; run inside scripts ${commandList(extra, 'lua.')}` +
      `; idle traffic ${extra?.idleCommandsPerSecond?.toFixed(2) ?? '–'} commands/s (subtracted)`
  })
  const peer = againstBullmq(results)
  return {
    ratios: [plain, submitMemory, submitRedis, lagMemory, lagRedis, ...lagRedisBefore, lagOther, ...issue30.flatMap(b => b.ratios), ...peer.ratios],
    checks: [...checks, ...peer.checks],
    notes: [
      `fleets: each sidecar runs ${SLOTS_EACH} at once (REPLICA_CONCURRENCY) against an app holding each call ${HOLD_MS} ms, so a sidecar's ceiling is ${SLOTS_EACH * 1000 / HOLD_MS} runs/s`,
      ...breakdown,
      ...peer.notes
    ]
  }
}

const maxLoad: LoadPhase['run'] = async (request, settings) => await runLoad(request, { connections: settings.connections, durationSeconds: settings.durationSeconds })
/** A phase measured by its targets' own `runPhase`. */
const ownPhase = (id: string, label: string, rateUnit: string): LoadPhase =>
  ({ id, label, rateUnit, run: async () => { throw new Error(`the ${id} phase runs through its target`) } })

/** The columns of the Redis traffic phases. */
const TRAFFIC_COLUMNS: LoadPhase['columns'] = [{ key: 'roundTripsPerRun', label: 'round trips/run', digits: 2 }, { key: 'commandsPerRun', label: 'commands/run', digits: 2 },
  { key: 'clientCommandsPerRun', label: 'client commands/run', digits: 2 }, { key: 'scriptCallsPerRun', label: 'script calls/run', digits: 2 },
  { key: 'luaCommandsPerRun', label: 'in scripts/run', digits: 2 }, { key: 'idleCommandsPerSecond', label: 'idle commands/s', digits: 2 },
  { key: 'idleCommandsPerProcessPerSecond', label: 'idle commands/s per process', digits: 3 }]

export const asyncScenario: Scenario = {
  name: 'async',
  baselineId: 'plain',
  description: 'async runs: submissions (202) per second, event lag from the app to a reader of the events route, plain calls with and without RUN_STORE_URL; ' +
    'and fleets of 2 and 4 sidecars × 2 slots sharing one Redis: runs with a backlog and the app\'s slot utilisation, submit → app below capacity, round trips and Redis commands per run; ' +
    `the 2-sidecar fleet against BullMQ ${BULLMQ_VERSION} doing the same work on the same Redis`,
  beforeIds: ['lag-redis', ...FLEETS.map(count => `fleet-${count}`)],
  phases: [
    { id: 'plain', label: 'plain calls, max throughput', run: maxLoad },
    { id: 'submit', label: 'async submissions, max throughput', run: maxLoad },
    { ...ownPhase('lag', `event lag, ${LAG_STREAMS} streamed runs × ${1000 / LAG_INTERVAL_MS} events/s`, 'events/s'),
      columns: [{ key: 'readers', label: 'readers' }, { key: 'p99RunnerSideMs', label: 'p99 ms, reader on the submitting sidecar', digits: 2 },
        { key: 'p99OtherSidecarMs', label: 'p99 ms, reader on the other', digits: 2 }] },
    { ...ownPhase('complete', 'runs completed end to end, with a backlog', 'runs/s'),
      columns: [{ key: 'runs', label: 'runs', combine: 'sum' }, { key: 'completed', label: 'completed', combine: 'sum' },
        { key: 'utilisation', label: 'slot utilisation at the app', digits: 3 }, { key: 'windowRunsPerSecond', label: 'runs/s at the app (backlog window)' },
        { key: 'mostAtOnce', label: 'most at once at the app', combine: 'max' }, { key: 'backlogLeft', label: 'queued at window end' }] },
    { ...ownPhase('paced', `submit → app, ${PACED_RATE} runs/s evenly paced (latency: the app's arrival − the submission's send)`, 'runs/s'),
      columns: [{ key: 'submitP50Ms', label: 'submit p50 ms (202)', digits: 2 }, { key: 'submitP99Ms', label: 'submit p99 ms (202)', digits: 2 },
        { key: 'redisCpuUsPerRun', label: 'Redis CPU µs/run' }, { key: 'redisBytesPerRun', label: 'Redis B kept/run' },
        { key: 'redisCappedBytesPerRun', label: 'Redis B/run in capped keys (left out)' }] },
    { ...ownPhase('commands', `Redis traffic per run, ${PACED_RATE} runs/s evenly paced (latency: the submissions')`, 'runs/s'), columns: TRAFFIC_COLUMNS },
    { ...ownPhase('commands-backlog', 'Redis traffic per run with a backlog (every slot\'s work for the phase submitted at once; latency: the submissions\')', 'runs/s'), columns: TRAFFIC_COLUMNS },
    { ...ownPhase('commands-one', 'Redis traffic per run, one at a time (each submitted once the one before ended; latency: the submissions\')', 'runs/s'), columns: TRAFFIC_COLUMNS }
  ],
  method: settings =>
    `Plain calls and submissions: autocannon, ${settings.connections} connections, ${settings.durationSeconds} s, auth on (a cached token); ` +
    'each submission is a POST ?async=true of the json-post body, run at the example app by the same sidecars meanwhile (ASYNC_QUEUE_DEPTH raised so none is refused). ' +
    `Event lag: ${LAG_STREAMS} async runs of the stream app (NDJSON, one line every ${LAG_INTERVAL_MS} ms for the phase, each stamped with its write time), ` +
    'each followed by one reader of its events route per sidecar; lag = arrival at the reader − the app\'s write (one clock). ' +
    `Fleets: ${FLEETS.join(' and ')} sidecars with REPLICA_CONCURRENCY=${SLOTS_EACH} in front of an app holding each call ${HOLD_MS} ms. ` +
    `With a backlog: every slot's work for ${settings.durationSeconds} s × 1.2 + 2 s submitted at once to the first sidecar (20 at a time), then for ${settings.durationSeconds} s ` +
    'the app\'s own time-weighted count of its calls in progress (arrival to the response\'s close) ÷ the slots = utilisation, valid only when runs were still queued at the end; ' +
    'runs/s: all runs ÷ (first submission → sidecar_runs_total{status="succeeded"} counts them all). ' +
    `Submit → app (2 sidecars): ${PACED_RATE} runs/s evenly paced, each body {"t": epoch µs at its send}, the app's arrival − t; ` +
    'Redis CPU/run: the redis-server\'s CPU seconds from the first submission until every run ended, ÷ runs; Redis B kept/run: used_memory at rest after − before, ÷ runs, ' +
    'less the growth of keys capped in length (BullMQ\'s events stream, full at any steady rate). ' +
    `Redis traffic (2 sidecars): ${PACED_RATE} runs/s paced for the phase until every run succeeded, then an idle span as long; INFO commandstats and MONITOR (a connection of its own) ` +
    'counted over each; per run = (busy − idle) ÷ runs. Round trips = batches of MONITOR lines of one client each within 50 µs of the line before (the commands its scripts ran included). ' +
    'Idle commands/s per process: MONITOR lines in the idle span before the reads that mirror the busy span\'s, ÷ its seconds ÷ the processes on the Redis. ' +
    'The same count with a backlog (every slot\'s work for the phase submitted at once, 20 at a time) and one at a time (each run submitted once the one before was counted ended, for the phase). ' +
    `BullMQ ${BULLMQ_VERSION} (the same phases as 2 sidecars, same app and Redis): a producer process (HTTP POST /run → Queue.add of the request, finished jobs kept an hour; 202 once added) ` +
    `and ${WORKERS} worker processes (Worker, concurrency ${CONCURRENCY}, the request sent to the app with undici, the app's body the job's result); ` +
    'jobs counted ended by the workers themselves, the idle traffic per process over its 3 processes. ' +
    'Redis: a private redis-server on a free port (BENCH_REDIS_URL names another, flushed), flushed before each target; its CPU counts with the shared processes.',
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
