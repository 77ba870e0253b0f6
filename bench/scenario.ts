import type { BenchChild } from './child-processes.ts'
import type { QuietGate } from './cpu-usage.ts'
import type { LoadRequest, Measurement } from './load.ts'
import type { ExtraColumn } from './aggregate.ts'
import type { BenchSettings } from './settings.ts'

/**
 * A scenario = a name, how to start its targets, and how to load them. run.ts: prepare (shared
 * processes), then round after round, for each target in turn (never two at once: 2 cores): start,
 * check one request, warm up, run every phase, stop; then combine the rounds and evaluate.
 */
export interface Scenario {
  /** Short id, e.g. `json-post`; a key in latest.json. */
  readonly name: string
  /** One line for the report. */
  readonly description: string
  /** The target the others are compared with (latency deltas), e.g. `direct`; it always runs. */
  readonly baselineId: string
  /** The load phases measured on every target, in order. */
  readonly phases: LoadPhase[]
  /** Starts what every target shares (the app, a JWKS server); returns the targets. */
  prepare: (ctx: BenchContext) => Promise<PreparedScenario>
  /** Ratios and target checks from the results of every target. */
  evaluate: (results: TargetResult[], settings: BenchSettings) => Evaluation
  /** How the scenario loads its targets, one paragraph for the report. */
  method: (settings: BenchSettings) => string
  /** Warm-up of a started target (default: load.ts `warmUp`, autocannon on its request). */
  warmUp?: (target: RunningTarget, settings: BenchSettings) => Promise<unknown>
  /** Sidecar targets measured again as `<id>-before` on BENCH_BEFORE_BIN (their `start` given that bin), with before/after ratios. */
  readonly beforeIds?: string[]
}

export interface BenchContext {
  readonly settings: BenchSettings
  /** The repository root (children run there). */
  readonly root: string
  /** A private temp dir for this run (child logs, generated configs). */
  readonly tmpDir: string
  /** Waits for other load on the machine to stop before a phase. */
  readonly quiet: QuietGate
}

export interface PreparedScenario {
  readonly targets: TargetDef[]
  /** The shared processes (the app), watched and CPU-accounted during every measurement. */
  readonly children: BenchChild[]
  /** Stops what `prepare` started. */
  close: () => Promise<void>
  /** Processes the bench did not start that work for the targets (database backends, Redis): CPU-accounted with the shared ones. */
  outsideProcesses?: () => Promise<Record<string, number>>
}

export interface TargetDef {
  /** e.g. `direct`, `http-proxy`, `sidecar`, `nginx`. */
  readonly id: string
  readonly label: string
  /** Set when the target cannot run here (e.g. nginx not installed): reported as skipped. */
  readonly skipReason?: string
  /** The ids of the scenario's phases this target runs (default: every phase). */
  readonly phases?: string[]
  /** Starts the target's own processes and waits until they are ready; `bin`: another sidecar build (see Scenario.beforeIds). */
  start: (bin?: string) => Promise<RunningTarget>
}

export interface RunningTarget {
  /** The request the load phases send (full URL, method, headers, body). */
  readonly request: LoadRequest
  /** Checks one response of the target (status and body); throws when it is wrong. */
  readonly checkResponse: (status: number, body: string) => void
  /** The processes started for this target (not the shared app). */
  readonly children: BenchChild[]
  /** Free-form notes for the report (e.g. the log level). */
  readonly notes?: string[]
  /** Runs a phase itself when sending the request is not all of it (default `phase.run(request, settings)`); CPU-accounted like the phase. */
  runPhase?: (phase: LoadPhase, settings: BenchSettings) => Promise<Measurement>
  stop: () => Promise<void>
}

/** One way of loading a target, e.g. max throughput or a fixed rate. */
export interface LoadPhase {
  /** Key in the results, e.g. `throughput`, `fixedRate`. */
  readonly id: string
  readonly label: string
  run: (request: LoadRequest, settings: BenchSettings) => Promise<Measurement>
  /** What `rps` counts, for the table header (default `req/s`; e.g. `events/s`). */
  readonly rateUnit?: string
  /** The phase's own figures (`Measurement.extra`), shown as extra table columns. */
  readonly columns?: ExtraColumn[]
  /** Run before the warm-up (an idle phase: the target as it started). */
  readonly beforeWarmUp?: boolean
}

export interface TargetResult {
  readonly id: string
  readonly label: string
  readonly skipped?: string
  readonly notes?: string[]
  /** Phase id → measurement, combined over the rounds (medians; see aggregate.ts). */
  readonly phases: Record<string, Measurement>
  /** Each round's own measurements, phase id → measurement; index = round − 1 ({} when the round failed or was skipped). */
  readonly rounds: Array<Record<string, Measurement>>
  /** Set when the target could not be measured at all (failed to start, wrong response). */
  readonly failure?: string
}

export interface Ratio {
  readonly id: string
  readonly label: string
  /** Null when a side is missing or invalid. */
  readonly value: number | null
  /** `B`: bytes; `/run`: a count per run (Redis commands); `µs`: CPU time; `/s`: a small rate (Redis commands at idle). */
  readonly unit: '×' | 'ms' | '%' | 'req/s' | 'vCPU' | 'MB' | 'B' | '/run' | 'µs' | '/s'
  /** The same comparison within each round (null where a side is missing or invalid). */
  readonly perRound?: Array<number | null>
  /** Per round: both sides were quiet. */
  readonly perRoundQuiet?: boolean[]
  /** No round was quiet for both sides. */
  readonly disturbed?: boolean
}

export interface Check {
  readonly label: string
  readonly status: 'PASS' | 'FAIL' | 'INVALID' | 'N/A'
  readonly detail: string
}

export interface Evaluation {
  readonly ratios: Ratio[]
  readonly checks: Check[]
  /** Scenario-level notes for the report. */
  readonly notes?: string[]
}
