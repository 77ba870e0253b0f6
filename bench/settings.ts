/** What a bench run is tuned by, read once from the `BENCH_*` variables (bench/README.md lists them with their defaults). */
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
  /** BENCH_SIDECAR_BIN, or undefined (this checkout's build). */
  sidecarBin: string | undefined
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
  /** BENCH_REDIS_URL: a Redis of your own for the async and recorded scenarios (flushed); undefined: a private redis-server they start. */
  redisUrl: string | undefined
}

/** A number from `env[name]` (`fallback` when unset) that must be > 0, or ≥ 0 when `orZero`. */
function number (env: NodeJS.ProcessEnv, name: string, fallback: number, orZero = false): number {
  const raw = env[name]
  if (raw === undefined || raw.trim() === '') return fallback
  const value = Number(raw)
  if (!Number.isFinite(value) || value < 0 || (value === 0 && !orZero)) throw new Error(`${name} must be a ${orZero ? 'number ≥ 0' : 'positive number'}, got ${JSON.stringify(raw)}`)
  return value
}

function flag (env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name]?.trim().toLowerCase()
  return raw === undefined || raw === '' ? fallback : !['0', 'false', 'no', 'off'].includes(raw)
}

const list = (raw: string | undefined): string[] | undefined => {
  const items = raw?.split(',').map(t => t.trim()).filter(t => t !== '')
  return items === undefined || items.length === 0 ? undefined : items
}

export function loadSettings (env: NodeJS.ProcessEnv = process.env): BenchSettings {
  const targets = list(env.BENCH_TARGETS)
  const int = (name: string, fallback: number): number => Math.round(number(env, name, fallback))
  return {
    durationSeconds: number(env, 'BENCH_DURATION_SECONDS', 10),
    rounds: Math.max(1, int('BENCH_ROUNDS', 3)),
    warmupSeconds: number(env, 'BENCH_WARMUP_SECONDS', 3),
    connections: int('BENCH_CONNECTIONS', 50),
    manyConnections: int('BENCH_MANY_CONNECTIONS', 1000),
    rate: int('BENCH_RATE', 1000),
    rateConnections: int('BENCH_RATE_CONNECTIONS', 20),
    targets: targets === undefined ? undefined : new Set(targets),
    sidecarBin: env.BENCH_SIDECAR_BIN?.trim() || undefined,
    beforeBin: env.BENCH_BEFORE_BIN?.trim() || undefined,
    cpuProf: flag(env, 'BENCH_CPU_PROF', false),
    keepTmp: flag(env, 'BENCH_KEEP_TMP', false),
    quietWaitSeconds: number(env, 'BENCH_QUIET_WAIT_SECONDS', 30, true),
    scenarios: list(env.BENCH_SCENARIOS) ?? null,
    sseStreams: int('BENCH_SSE_STREAMS', 100),
    sseIntervalMs: number(env, 'BENCH_SSE_INTERVAL_MS', 10),
    wsConnections: int('BENCH_WS_CONNECTIONS', 100),
    wsIntervalMs: number(env, 'BENCH_WS_INTERVAL_MS', 10),
    gateConcurrency: int('BENCH_GATE_CONCURRENCY', 8),
    gateHoldMs: number(env, 'BENCH_GATE_HOLD_MS', 20),
    gateCallers: int('BENCH_GATE_CALLERS', 200),
    databaseUrl: env.BENCH_DATABASE_URL?.trim() || env.TEST_DATABASE_URL?.trim() || 'postgres://postgres@127.0.0.1:5432/test',
    postgres: flag(env, 'BENCH_POSTGRES', true),
    redisUrl: env.BENCH_REDIS_URL?.trim() || undefined
  }
}
