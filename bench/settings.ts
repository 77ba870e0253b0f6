/**
 * What a bench run is tuned by, read once from the environment so a quick run is one variable away:
 *
 *   BENCH_DURATION_SECONDS   seconds of each measured phase (default 10)
 *   BENCH_ROUNDS             rounds over all targets, interleaved; each number is the median (default 3)
 *   BENCH_WARMUP_SECONDS     seconds of warm-up load before a target is measured (default 3)
 *   BENCH_CONNECTIONS        connections of the throughput phase (default 50)
 *   BENCH_RATE               requests/s of the fixed-rate phase (default 1000)
 *   BENCH_RATE_CONNECTIONS   connections of the fixed-rate phase (default 20)
 *   BENCH_TARGETS            comma-separated target ids to run (default: all); `direct` always runs
 *   BENCH_SIDECAR_INFO       0 skips the extra sidecar row at LOG_LEVEL=info (default 1)
 *   BENCH_CPU_PROF           1 runs the sidecar under `node --cpu-prof` (profiles in bench/results/profiles)
 *   BENCH_QUIET_WAIT_SECONDS longest wait for other load on the machine to stop before a phase (default 30; 0: never wait)
 *   BENCH_KEEP_TMP           1 keeps the temp dir (child logs, nginx.conf) after the run
 */
export interface BenchSettings {
  durationSeconds: number
  rounds: number
  warmupSeconds: number
  connections: number
  rate: number
  rateConnections: number
  /** Undefined: every target. */
  targets: Set<string> | undefined
  sidecarInfo: boolean
  cpuProf: boolean
  keepTmp: boolean
  quietWaitSeconds: number
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

export function loadSettings (env: NodeJS.ProcessEnv = process.env): BenchSettings {
  const targets = env.BENCH_TARGETS?.trim()
  return {
    durationSeconds: positive('BENCH_DURATION_SECONDS', 10, env),
    rounds: Math.max(1, Math.round(positive('BENCH_ROUNDS', 3, env))),
    warmupSeconds: positive('BENCH_WARMUP_SECONDS', 3, env),
    connections: Math.round(positive('BENCH_CONNECTIONS', 50, env)),
    rate: Math.round(positive('BENCH_RATE', 1000, env)),
    rateConnections: Math.round(positive('BENCH_RATE_CONNECTIONS', 20, env)),
    targets: targets === undefined || targets === '' ? undefined : new Set(targets.split(',').map(t => t.trim()).filter(t => t !== '')),
    sidecarInfo: flag('BENCH_SIDECAR_INFO', true, env),
    cpuProf: flag('BENCH_CPU_PROF', false, env),
    keepTmp: flag('BENCH_KEEP_TMP', false, env),
    quietWaitSeconds: nonNegative('BENCH_QUIET_WAIT_SECONDS', 30, env)
  }
}
