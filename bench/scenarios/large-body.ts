import { setTimeout as sleep } from 'node:timers/promises'
import { highest, roundsOf, withRounds } from '../checks.ts'
import { Latencies, type LoadRequest, type Measurement, summarize } from '../load.ts'
import type { BenchContext, Check, Evaluation, LoadPhase, PreparedScenario, Ratio, RunningTarget, Scenario, TargetDef, TargetResult } from '../scenario.ts'
import { freePort } from '../child-processes.ts'
import { LiveHeapProbe } from '../live-heap.ts'
import { APP_NAME, PROJECT_ID, shareServers, sidecarBin, startBenchServer, type StartedServer, startSidecarProcess } from '../targets.ts'

/**
 * Issue 13: memory bounded by design. The cortex sidecar wraps the large-body app's 1, 10 and 30 MB
 * JSON bodies, one at a time, with peak RSS ≤ idle RSS + 3 × the body; the app reached directly and
 * a RUNTIME=custom sidecar (passthrough) are for contrast.
 */
const MB = 1e6
const SIZES_MB = [1, 10, 30]
const RSS_BODY_FACTOR = 3
const REQUESTS_PER_SIZE = 10
const IDLE_SECONDS = 3
/** The one-off check, the warm-up and the idle phase's only request: a body too small to matter. */
const SMALL_BYTES = 1000
const WARMUP_REQUESTS = 50
const DATA_WRAPPER_BYTES = '{"data":""}'.length
const ENVELOPE_KEYS = 'run_id,result,run_time_ms,timestamp'

/** What a target answers: the app's body as sent, or the cortex envelope around it. */
type Shape = 'raw' | 'envelope'

interface BodyPhase extends LoadPhase {
  readonly bytes: number
  readonly requests: number
  /** Seconds at rest before the requests. */
  readonly restSeconds: number
}

const bodyPhase = (id: string, label: string, bytes: number, requests: number, restSeconds = 0): BodyPhase =>
  ({ id, label, bytes, requests, restSeconds, run: async request => await runBodies({ bytes, requests, restSeconds }, request, 'raw') })

const PHASES: BodyPhase[] = [
  bodyPhase('idle', `idle (${IDLE_SECONDS} s at rest, then one ${SMALL_BYTES}-byte response)`, SMALL_BYTES, 1, IDLE_SECONDS),
  ...SIZES_MB.map(mb => bodyPhase(`body-${mb}mb`, `${mb} MB responses, ${REQUESTS_PER_SIZE} one after another`, mb * MB, REQUESTS_PER_SIZE))
]
const WARM_UP = bodyPhase('warm-up', 'warm-up', SMALL_BYTES, WARMUP_REQUESTS)

/** Throws unless `body` is the app's `{"data":"x…"}` of `bytes` bytes, as sent or as the envelope's `result`. */
function checkBody (status: number, body: string, bytes: number, shape: Shape): void {
  if (status !== 200) throw new Error(`expected 200, got ${status}: ${body.slice(0, 200)}`)
  if (shape === 'raw' && body.length !== bytes) throw new Error(`expected ${bytes} bytes, got ${body.length}: ${body.slice(0, 100)}…`)
  const parsed = JSON.parse(body) as Record<string, unknown>
  if (shape === 'envelope' && Object.keys(parsed).join() !== ENVELOPE_KEYS) throw new Error(`not the envelope: ${body.slice(0, 100)}…`)
  const data = ((shape === 'envelope' ? parsed.result : parsed) as { data?: unknown } | undefined)?.data
  if (typeof data !== 'string' || data.length !== bytes - DATA_WRAPPER_BYTES) throw new Error(`expected {"data": <${bytes - DATA_WRAPPER_BYTES} chars>}: ${body.slice(0, 100)}…`)
}

/**
 * Rests, then sends `requests` GETs for `bytes`-byte bodies one after another, each body checked
 * whole; `collect`, when given, runs after each response (a full collection in the target).
 */
async function runBodies (phase: Pick<BodyPhase, 'bytes' | 'requests' | 'restSeconds'>, request: LoadRequest, shape: Shape,
  collect?: () => Promise<unknown>): Promise<Measurement> {
  const url = request.url.replace(/bytes=\d+/, `bytes=${phase.bytes}`)
  const latencies = new Latencies()
  const statusCodes: Record<string, number> = {}
  let [ok, errors, timeouts, non2xx] = [0, 0, 0, 0]
  let firstProblem: string | undefined
  const startedAt = performance.now()
  await sleep(phase.restSeconds * 1000)
  for (let i = 0; i < phase.requests; i++) {
    const sentAt = performance.now()
    try {
      const response = await fetch(url, { headers: request.headers, signal: AbortSignal.timeout(60_000) })
      const body = await response.text()
      statusCodes[response.status] = (statusCodes[response.status] ?? 0) + 1
      if (response.status < 200 || response.status >= 300) {
        non2xx++
        firstProblem ??= `${response.status}: ${body.slice(0, 200)}`
        continue
      }
      const latencyMs = performance.now() - sentAt
      checkBody(response.status, body, phase.bytes, shape) // a 2xx with a wrong body counts as an error
      latencies.push(latencyMs)
      ok++
    } catch (error) {
      errors++
      if (error instanceof Error && error.name === 'TimeoutError') timeouts++
      firstProblem ??= error instanceof Error ? error.message : String(error)
    }
    await collect?.()
  }
  if (firstProblem !== undefined) process.stderr.write(`bench: large-body ${phase.bytes} bytes: first failure: ${firstProblem}\n`)
  return summarize(latencies.values.subarray(0, latencies.count), { ok, errors, timeouts, non2xx, statusCodes, durationSeconds: (performance.now() - startedAt) / 1000, connections: 1 })
}

function phaseById (id: string): BodyPhase {
  return [...PHASES, WARM_UP].find(p => p.id === id) ?? (() => { throw new Error(`large-body: no phase ${id}`) })()
}

function bodyTarget (server: StartedServer, url: string, headers: Record<string, string>, shape: Shape, notes: string[], heap?: LiveHeapProbe): RunningTarget {
  const request: LoadRequest = { url: `${url}?bytes=${SMALL_BYTES}`, method: 'GET', headers }
  return {
    request,
    checkResponse: (status, body) => { checkBody(status, body, SMALL_BYTES, shape) },
    children: [server.child],
    notes,
    runPhase: async phase => await runBodies(phaseById(phase.id), request, shape, heap === undefined ? undefined : async () => await heap.liveHeapMb()),
    stop: async () => {
      heap?.close()
      await server.child.stop()
    }
  }
}

async function prepare (ctx: BenchContext): Promise<PreparedScenario> {
  const { servers: { app }, jwks, token, prepared } = await shareServers(ctx, { app: c => startBenchServer(c, 'large-body-app') })
  const bin = sidecarBin(ctx)
  const sidecarTarget = (runtime: 'cortex' | 'custom'): TargetDef => ({
    id: runtime === 'cortex' ? 'sidecar' : 'sidecar-custom',
    label: `sidecar (RUNTIME=${runtime})`,
    start: async () => {
      const inspectPort = await freePort()
      const sidecar = await startSidecarProcess(ctx, {
        appOrigin: app.origin, jwksUrl: jwks.url, logLevel: 'info', name: `sidecar-${runtime}`, env: { PROJECT_ID, APP_NAME, RUNTIME: runtime },
        nodeArgs: [`--inspect=127.0.0.1:${inspectPort}`]
      })
      const heap = await LiveHeapProbe.connect(inspectPort)
      const notes = [`auth on (a cached token), LOG_LEVEL=info, RUNTIME=${runtime}${runtime === 'cortex' ? ' (every 2xx body wrapped in the envelope)' : ' (bodies passed through)'}; bin ${bin}`]
      return bodyTarget(sidecar, `${sidecar.origin}/v4/${PROJECT_ID}/${APP_NAME}/body`, { authorization: `Bearer ${token}` }, runtime === 'cortex' ? 'envelope' : 'raw', notes, heap)
    }
  })
  const direct: TargetDef = {
    id: 'direct',
    label: 'direct (the app, its own process)',
    start: async () => {
      const own = await startBenchServer(ctx, 'large-body-app', {}, 'large-body-app-direct')
      return bodyTarget(own, `${own.origin}/body`, {}, 'raw', ['its peak RSS is the app\'s own: the bodies it keeps (1 + 10 + 30 MB by the last phase) and what sending them costs'])
    }
  }
  return prepared([direct, sidecarTarget('cortex'), sidecarTarget('custom')])
}

function evaluate (results: TargetResult[]): Evaluation {
  const ratios: Ratio[] = []
  const checks: Check[] = []
  for (const result of results) {
    if (result.skipped !== undefined) continue
    const idle = roundsOf(results, result.id, 'idle')
    for (const mb of SIZES_MB) {
      const phaseId = `body-${mb}mb`
      const measured = roundsOf(results, result.id, phaseId)
      // per round, the phase's peak RSS minus the idle phase's, then the highest of the rounds (memory is not noise)
      const ratio = highest(`rss-growth/${phaseId}/${result.id}`, `${result.label}: peak RSS − idle RSS, ${mb} MB responses`, measured.map((m, i) => {
        const rest = idle[i]?.peakRssMb
        return m?.peakRssMb === undefined || rest === undefined ? null : m.peakRssMb - rest
      }))
      ratios.push(ratio)
      if (result.id !== 'sidecar') continue
      const label = `sidecar peak RSS ≤ idle + ${RSS_BODY_FACTOR} × body, ${mb} MB responses`
      const limit = RSS_BODY_FACTOR * mb
      if (ratio.value === null) { checks.push({ label, status: 'INVALID', detail: 'no memory figure (the target failed, or no Linux /proc)' }); continue }
      const failed = measured.reduce((total, m) => total + (m === undefined ? 0 : m.errors + m.non2xx), 0)
      const figures = `peak ${result.phases[phaseId]?.peakRssMb?.toFixed(1)} MB, idle ${result.phases.idle?.peakRssMb?.toFixed(1)} MB: ` +
        `growth ${withRounds(ratio, ratio.value)}; limit ${limit.toFixed(1)} MB, margin ${(limit - ratio.value).toFixed(1)} MB`
      checks.push({ label, status: ratio.value <= limit ? 'PASS' : 'FAIL', detail: failed === 0 ? figures : `${figures}; the phase also had ${failed} failed requests (see its table)` })
    }
  }
  return {
    ratios,
    checks,
    notes: ['MB = 10⁶ bytes, bodies and RSS alike. Idle RSS = the peak of the idle phase (after the warm-up, at rest). ' +
      'The sidecars run with --inspect on loopback and get a full collection after every response (HeapProfiler.collectGarbage), ' +
      'so each response is measured from a collected heap: without it, V8 frees earlier responses\' socket buffers only at a ' +
      'collection that external memory triggers late, and ten back to back show their garbage, not what one response holds. ' +
      'The app reached directly gets no collection.']
  }
}

export const largeBodyScenario: Scenario = {
  name: 'large-body',
  baselineId: 'direct',
  description: 'GET of 1, 10 and 30 MB JSON bodies (the large-body app of bench/servers.ts), one at a time; sidecar with auth on (a cached token), LOG_LEVEL=info, RUNTIME=cortex (the envelope) or custom',
  phases: PHASES,
  warmUp: async (target, settings) => await target.runPhase?.(WARM_UP, settings),
  method: () =>
    `Warm-up: ${WARMUP_REQUESTS} requests for ${SMALL_BYTES}-byte bodies. Idle: ${IDLE_SECONDS} s without load, then one such request. ` +
    `Then per size (${SIZES_MB.join(', ')} MB; the default ENVELOPE_MAX_BODY_BYTES is 32 MiB): ${REQUESTS_PER_SIZE} requests one after another ` +
    '(one keep-alive connection, fetch), each response checked whole: 200, the exact length, and the body parsed once ' +
    '(the envelope\'s `result` is the app\'s `{"data": …}`); each sidecar gets a full collection through the inspector after every response. ' +
    'Latencies in ms to the last byte (collections included); the figure that matters is the peak RSS ' +
    `(VmHWM, reset at each phase's start): the sidecar's must stay ≤ its idle RSS + ${RSS_BODY_FACTOR} × the body.`,
  prepare,
  evaluate
}
