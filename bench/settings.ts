/**
 * What a bench run is tuned by, read once from the environment so a quick run is one variable away:
 *
 *   BENCH_DURATION_SECONDS   seconds of each measured phase (default 10)
 *   BENCH_ROUNDS             rounds over all targets, interleaved; each number is the median (default 3)
 *   BENCH_WARMUP_SECONDS     seconds of warm-up load before a target is measured (default 3)
 *   BENCH_CONNECTIONS        connections of the throughput phase (default 50)
 *   BENCH_MANY_CONNECTIONS   connections of json-post's many-connections phase (default 1000)
 *   BENCH_RATE               requests/s of the fixed-rate phase (default 1000)
 *   BENCH_RATE_CONNECTIONS   connections of the fixed-rate phase (default 20)
 *   BENCH_TARGETS            comma-separated target ids to run (default: all); `direct` always runs
 *   BENCH_BEFORE_BIN         an older build's dist/bin/app-sidecar.js: each scenario's headline sidecar rows run on it too, as `<id>-before` (before/after in one run)
 *   BENCH_CPU_PROF           1 runs the sidecar under `node --cpu-prof` (profiles in bench/results/profiles)
 *   BENCH_QUIET_WAIT_SECONDS longest wait for other load on the machine to stop before a phase (default 30; 0: never wait)
 *   BENCH_KEEP_TMP           1 keeps the temp dir (child logs, nginx.conf) after the run
 *   BENCH_SCENARIOS          comma-separated scenarios, or `all` (default: all)
 *   BENCH_SSE_STREAMS        concurrent streams of the sse scenario (default 100)
 *   BENCH_SSE_INTERVAL_MS    pace of each stream in the sse latency phase (default 10)
 *   BENCH_WS_CONNECTIONS     WebSockets of the websocket paced phase (default 100; its throughput phase uses BENCH_CONNECTIONS)
 *   BENCH_WS_INTERVAL_MS     pace of each WebSocket in the websocket paced phase (default 10)
 *   BENCH_GATE_CONCURRENCY   REPLICA_CONCURRENCY of the gate scenario (default 8)
 *   BENCH_GATE_HOLD_MS       how long the gate scenario's app holds each call (default 20)
 *   BENCH_GATE_CALLERS       concurrent callers of the gate's saturated phase (default 200)
 *   BENCH_DATABASE_URL       PostgreSQL of the get-build scenario (else TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test)
 *   BENCH_POSTGRES           0 skips the PostgreSQL half of get-build (default 1)
 */
export interface BenchSettings {
  durationSeconds: number
  rounds: number
  warmupSeconds: number
  connections: number
  manyConnections: number
  rate: number
  rateConnections: number
  /** Undefined: every target. */
  targets: Set<string> | undefined
  /** BENCH_BEFORE_BIN, or undefined. */
  beforeBin: string | undefined
  cpuProf: boolean
  keepTmp: boolean
  quietWaitSeconds: number
  /** Null: the default set (all); `all` is expanded by run.ts. */
  scenarios: string[] | null
  sseStreams: number
  sseIntervalMs: number
  wsConnections: number
  wsIntervalMs: number
  gateConcurrency: number
  gateHoldMs: number
  gateCallers: number
  /** May hold a password: never written to the report as is (see run.ts). */
  databaseUrl: string
  postgres: boolean
}

function positive (name: string, fallback: number, env: NodeJS.ProcessEnv): number {
  const raw = env[name]
  if (raw === undefined || raw.trim() === '') return fallback
  const value = Number(raw)
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number, got ${JSON.stringify(raw)}`)
  return value
}

function nonNegative (name: string, fallback: number, env: NodeJS.ProcessEnv): number {
  const raw = env[name]
  if (raw === undefined || raw.trim() === '') return fallback
  const value = Number(raw)
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a number ≥ 0, got ${JSON.stringify(raw)}`)
  return value
}

function flag (name: string, fallback: boolean, env: NodeJS.ProcessEnv): boolean {
  const raw = env[name]?.trim().toLowerCase()
  if (raw === undefined || raw === '') return fallback
  return !['0', 'false', 'no', 'off'].includes(raw)
}

const list = (raw: string | undefined): string[] | undefined => {
  const items = raw?.split(',').map(t => t.trim()).filter(t => t !== '')
  return items === undefined || items.length === 0 ? undefined : items
}

export function loadSettings (env: NodeJS.ProcessEnv = process.env): BenchSettings {
  const targets = list(env.BENCH_TARGETS)
  return {
    durationSeconds: positive('BENCH_DURATION_SECONDS', 10, env),
    rounds: Math.max(1, Math.round(positive('BENCH_ROUNDS', 3, env))),
    warmupSeconds: positive('BENCH_WARMUP_SECONDS', 3, env),
    connections: Math.round(positive('BENCH_CONNECTIONS', 50, env)),
    manyConnections: Math.round(positive('BENCH_MANY_CONNECTIONS', 1000, env)),
    rate: Math.round(positive('BENCH_RATE', 1000, env)),
    rateConnections: Math.round(positive('BENCH_RATE_CONNECTIONS', 20, env)),
    targets: targets === undefined ? undefined : new Set(targets),
    beforeBin: env.BENCH_BEFORE_BIN?.trim() || undefined,
    cpuProf: flag('BENCH_CPU_PROF', false, env),
    keepTmp: flag('BENCH_KEEP_TMP', false, env),
    quietWaitSeconds: nonNegative('BENCH_QUIET_WAIT_SECONDS', 30, env),
    scenarios: list(env.BENCH_SCENARIOS) ?? null,
    sseStreams: Math.round(positive('BENCH_SSE_STREAMS', 100, env)),
    sseIntervalMs: positive('BENCH_SSE_INTERVAL_MS', 10, env),
    wsConnections: Math.round(positive('BENCH_WS_CONNECTIONS', 100, env)),
    wsIntervalMs: positive('BENCH_WS_INTERVAL_MS', 10, env),
    gateConcurrency: Math.round(positive('BENCH_GATE_CONCURRENCY', 8, env)),
    gateHoldMs: positive('BENCH_GATE_HOLD_MS', 20, env),
    gateCallers: Math.round(positive('BENCH_GATE_CALLERS', 200, env)),
    databaseUrl: env.BENCH_DATABASE_URL?.trim() || env.TEST_DATABASE_URL?.trim() || 'postgres://postgres@127.0.0.1:5432/test',
    postgres: flag('BENCH_POSTGRES', true, env)
  }
}
