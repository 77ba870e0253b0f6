import { atMost, ownFigure, pairedRatio, rateNotReached, roundsOf, thresholdCheck } from '../checks.ts'
import type { Measurement } from '../load.ts'
import type { Check, Ratio, TargetResult } from '../scenario.ts'
import { commandList } from './async-commands.ts'
import { BULLMQ_VERSION } from './async-bullmq.ts'
import { PACED_RATE } from './async-runs.ts'

/**
 * fleet-2 against its BullMQ peer (issue 39), figure by figure, each ratio made within a round (the
 * two ran in the same rounds on the same Redis) and checked as "the sidecar no worse than BullMQ":
 * ≤ 1 for costs and latency, ≥ 1 for utilisation and runs/s. Also the sidecars' idle traffic
 * against its own target.
 */
const IDLE_TARGET = 0.1

interface PeerFigure {
  readonly id: string
  readonly label: string
  readonly phase: 'complete' | 'paced' | 'commands' | 'commands-backlog' | 'commands-one'
  readonly unit: Ratio['unit']
  readonly of: (x: Measurement) => number
  /** The sidecar should be at least BullMQ's (else at most). */
  readonly higherIsBetter: boolean
  /** fleet-2's own figure is new here (the others are already among the scenario's). */
  readonly newForFleet: boolean
}

const extra = (key: string) => (x: Measurement): number => x.extra?.[key] ?? NaN

const FIGURES: PeerFigure[] = [
  { id: 'commands', label: `Redis commands per run, ${PACED_RATE} runs/s paced (INFO commandstats, busy − idle)`, phase: 'commands', unit: '/run', of: extra('commandsPerRun'), higherIsBetter: false, newForFleet: false },
  { id: 'commands-backlog', label: 'Redis commands per run with a backlog (INFO commandstats, busy − idle)', phase: 'commands-backlog', unit: '/run', of: extra('commandsPerRun'), higherIsBetter: false, newForFleet: true },
  { id: 'commands-one', label: 'Redis commands per run, one at a time (INFO commandstats, busy − idle)', phase: 'commands-one', unit: '/run', of: extra('commandsPerRun'), higherIsBetter: false, newForFleet: true },
  { id: 'bytes', label: 'Redis bytes kept per finished run (used_memory at rest after − before the paced phase ÷ runs; kept an hour)', phase: 'paced', unit: 'B', of: extra('redisBytesPerRun'), higherIsBetter: false, newForFleet: true },
  { id: 'redis-cpu', label: `Redis CPU per run (redis-server's CPU from the first submission to the last end, ${PACED_RATE} runs/s paced, ÷ runs)`, phase: 'paced', unit: 'µs', of: extra('redisCpuUsPerRun'), higherIsBetter: false, newForFleet: true },
  { id: 'utilisation', label: 'slot utilisation with a backlog (∫ in-flight dt at the app ÷ 4 slots × span)', phase: 'complete', unit: '%', of: extra('utilisation'), higherIsBetter: true, newForFleet: false },
  { id: 'runs', label: 'runs completed/s with a backlog (first submission → last end)', phase: 'complete', unit: 'req/s', of: x => x.rps, higherIsBetter: true, newForFleet: false },
  { id: 'idle', label: 'idle Redis commands/s per process right after the runs (MONITOR; 2 sidecars, or 2 workers + the producer)', phase: 'commands', unit: '/s', of: extra('idleCommandsPerProcessPerSecond'), higherIsBetter: false, newForFleet: true },
  { id: 'steady-idle', label: 'steady idle Redis commands/s per process (MONITOR, from 40 s after the runs, 30 s; 2 sidecars, or 2 workers + the producer)', phase: 'commands', unit: '/s', of: extra('steadyIdleCommandsPerProcessPerSecond'), higherIsBetter: false, newForFleet: true },
  { id: 'submit-to-app', label: `submit → app p99, ${PACED_RATE} runs/s paced (the app's arrival − the submission's send)`, phase: 'paced', unit: 'ms', of: x => x.p99Ms, higherIsBetter: false, newForFleet: false }
]

/** The BullMQ peer's figures, fleet-2's new ones, fleet-2 ÷ BullMQ for each, their checks, and BullMQ's commands by name. */
export function againstBullmq (results: TargetResult[]): { ratios: Ratio[], checks: Check[], notes: string[] } {
  const rounds = (id: string, phase: string): Array<Measurement | undefined> => roundsOf(results, id, phase)
  const pacedShort = [rateNotReached(rounds('fleet-2', 'paced'), PACED_RATE, 'runs/s', 'fleet-2\'s paced rate'),
    rateNotReached(rounds('bullmq', 'paced'), PACED_RATE, 'runs/s', 'BullMQ\'s paced rate')].filter(r => r !== undefined).join('; ')
  const ratios: Ratio[] = []
  const checks: Check[] = []
  for (const f of FIGURES) {
    if (f.newForFleet) ratios.push(ownFigure(`${f.id}-fleet-2`, `${f.label}, 2 sidecars × 2 slots`, f.unit, rounds('fleet-2', f.phase), f.of))
    ratios.push(ownFigure(`${f.id}-bullmq`, `${f.label}, BullMQ ${BULLMQ_VERSION}`, f.unit, rounds('bullmq', f.phase), f.of))
    const ratio = pairedRatio(`${f.id}/bullmq`, `fleet-2 ÷ BullMQ: ${f.label}`, '×', rounds('fleet-2', f.phase), rounds('bullmq', f.phase), (x, y) => f.of(x) / f.of(y))
    ratios.push(ratio)
    const label = `sidecar ${f.higherIsBetter ? '≥' : '≤'} BullMQ: ${f.label.replace(/ \(.*\)$/, '')}`
    const invalid = f.phase === 'paced' && pacedShort !== '' ? pacedShort : undefined
    checks.push(f.higherIsBetter ? thresholdCheck(label, ratio, 1, true) : atMost(label, ratio, 1, invalid))
  }
  const idle = ratios.find(r => r.id === 'steady-idle-fleet-2') as Ratio
  checks.push(atMost(`steady idle Redis commands/s per sidecar ≤ ${IDLE_TARGET}`, idle, IDLE_TARGET))
  const bullmq = results.find(r => r.id === 'bullmq')?.phases.commands?.extra
  const notes = bullmq === undefined
    ? []
    : [`Redis commands per job by name, BullMQ ${BULLMQ_VERSION}: sent by its processes ${commandList(bullmq, 'client.')}; run inside scripts ${commandList(bullmq, 'lua.')}` +
      `; idle traffic ${bullmq.idleCommandsPerSecond?.toFixed(2) ?? '–'} commands/s (subtracted)`]
  return { ratios, checks, notes }
}
