import { spawn } from 'node:child_process'
import { copyFileSync, cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { built, type Child, runNode } from '../helpers/child-process.ts'
import { reapOnExit } from '../helpers/child-reaper.ts'
import { freePort } from '../helpers/ports.ts'
import { sleep } from '../helpers/timing.ts'

// Runs the docs' runnable blocks (see doc-blocks.ts) as a reader would, with the ports they name
// moved to free ones so that nothing on the machine (a demo left running, a Redis on 6379) is met.

export const ROOT = fileURLToPath(new URL('../../', import.meta.url))

/**
 * The ports the docs name (the demo's sidecar and admin port, other sidecars', the apps', the
 * webhook receiver's, the OTLP collector's, the build store's, Redis's): in a runnable block each
 * whole number among them is a port, given a free one for the run; the block's output has them
 * put back, so a stated output can name them as the reader sees them.
 */
export const DOC_PORTS = [8000, 8001, 8002, 9090, 9091, 9092, 8192, 8193, 3000, 4318, 7070, 6379, 6380] as const
const portPattern = (ports: Iterable<number>): RegExp => new RegExp(`(?<=^|[^\\w.]|%3A)(${[...ports].join('|')})(?!\\w)`, 'g')

/** `text` with every port of `ports` (documented port → free port) replaced. */
export function movePorts (text: string, ports: ReadonlyMap<number, number>): string {
  return ports.size === 0 ? text : text.replace(portPattern(ports.keys()), port => String(ports.get(Number(port))))
}

/** `ports` (documented port → free port) for the DOC_PORTS `code` names, with those of `given` kept. */
export async function portsFor (code: string, given: ReadonlyMap<number, number>): Promise<Map<number, number>> {
  const ports = new Map(given)
  for (const [port] of code.matchAll(portPattern(DOC_PORTS))) if (!ports.has(Number(port))) ports.set(Number(port), await freePort())
  // a sidecar started without PORT or ADMIN_PORT takes 8000 and 9090: they get free ones too
  for (const port of [8000, 9090]) if (!ports.has(port)) ports.set(port, await freePort())
  return ports
}

/** The demo (`npm start` runs `node dist/demo/start.js`) on free ports, and what it printed to export. */
export interface Demo {
  readonly port: number
  readonly adminPort: number
  readonly env: { TOKEN: string, ADMIN_TOKEN: string }
  stop: () => Promise<void>
}

export async function startDemo (env: Record<string, string>): Promise<Demo> {
  const dataHome = mkdtempSync(join(tmpdir(), 'docs-demo-'))
  const demo: Child = runNode([built('src/demo/start.ts')], { ...env, PORT: '0', TMPDIR: dataHome })
  const stop = async (): Promise<void> => {
    if (demo.process.exitCode === null && demo.process.signalCode === null) {
      demo.process.kill('SIGTERM')
      await demo.exited
    }
    rmSync(dataHome, { recursive: true, force: true })
  }
  try {
    const listening = await Promise.race([
      demo.waitForLine(line => line.msg === 'sidecar listening', 30_000),
      demo.exited.then(code => { throw new Error(`the demo exited (${code}): ${demo.stderr}`) })
    ])
    const until = Date.now() + 10_000
    while (!demo.stderr.includes('Ctrl-C drains and stops')) {
      if (Date.now() > until) throw new Error(`the demo printed no commands: ${demo.stderr}`)
      await sleep(20)
    }
    const exported = (name: string): string => {
      const value = new RegExp(`^export ${name}=(\\S+)$`, 'm').exec(demo.stderr)?.[1]
      if (value === undefined) throw new Error(`the demo printed no export ${name}: ${demo.stderr}`)
      return value
    }
    return { port: listening.port as number, adminPort: listening.adminPort as number, env: { TOKEN: exported('TOKEN'), ADMIN_TOKEN: exported('ADMIN_TOKEN') }, stop }
  } catch (error) {
    await stop()
    throw error
  }
}

export interface BlockResult {
  /** bash's exit code, or the signal that ended it (`SIGKILL` at the time limit). */
  readonly exit: number | string
  /** stdout, with the documented ports back in place of the free ones. */
  readonly stdout: string
  readonly stderr: string
  /** Whether a process the block started was still running when it ended (and was killed). */
  readonly leftOver: boolean
}

/** Whether a process of process group `group` runs (zombies, which only wait to be reaped, aside). */
function alive (group: number): boolean {
  let entries: string[]
  try { entries = readdirSync('/proc') } catch {
    try { process.kill(-group, 0); return true } catch { return false } // no /proc: zombies count
  }
  return entries.some(pid => {
    if (!/^\d+$/.test(pid)) return false
    let stat: string
    try { stat = readFileSync(`/proc/${pid}/stat`, 'utf8') } catch { return false }
    // after "pid (comm) ": state, ppid, pgrp
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return Number(pgrp) === group && state !== 'Z'
  })
}

/**
 * A folder laid out as the repository folder is for what a block uses (`node dist/…`, `import …
 * from 'app-sidecar'`): a copy of package.json and dist/ (copies: Node runs a symlinked main
 * module under its real path) and node_modules; what a block writes there goes before the next.
 */
export interface Scratch {
  readonly folder: string
  /** Removes what the last block wrote. */
  clean: () => void
  remove: () => void
}

const LAYOUT = ['package.json', 'dist', 'node_modules']

export function createScratch (): Scratch {
  const folder = mkdtempSync(join(tmpdir(), 'docs-blocks-'))
  copyFileSync(join(ROOT, 'package.json'), join(folder, 'package.json'))
  cpSync(join(ROOT, 'dist'), join(folder, 'dist'), { recursive: true })
  symlinkSync(join(ROOT, 'node_modules'), join(folder, 'node_modules'))
  return {
    folder,
    clean: () => {
      for (const name of readdirSync(folder)) if (!LAYOUT.includes(name)) rmSync(join(folder, name), { recursive: true, force: true })
    },
    remove: () => { rmSync(folder, { recursive: true, force: true }) }
  }
}

/**
 * Runs `code` in `bash` with `set -euo pipefail`, its ports moved, in `scratch`, in a process
 * group of its own, killed when the block ends or passes `timeoutMs`.
 */
export async function runBlock (code: string, ports: ReadonlyMap<number, number>, env: Record<string, string>, scratch: Scratch, timeoutMs = 30_000): Promise<BlockResult> {
  scratch.clean()
  const moved = new Map([...ports].map(([doc, free]) => [free, doc]))
  // its group goes with the test too, should tap time it out mid-block
  const child = reapOnExit(spawn('bash', ['-c', `set -euo pipefail\n${movePorts(code, ports)}`], {
    cwd: scratch.folder,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? scratch.folder, PORT: String(ports.get(8000)), ADMIN_PORT: String(ports.get(9090)), ...env }
  }), true)
  const closed = new Promise(resolve => child.once('close', resolve))
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (text: string) => { stdout += text })
  child.stderr.setEncoding('utf8').on('data', (text: string) => { stderr += text })
  const group = child.pid as number
  const timer = setTimeout(() => { try { process.kill(-group, 'SIGKILL') } catch {} }, timeoutMs)
  const exit = await new Promise<number | string>(resolve => { child.once('exit', (status, signal) => { resolve(status ?? signal ?? -1) }) })
  clearTimeout(timer)
  // what the block started and stopped may take a moment to exit
  const until = Date.now() + 5_000
  while (alive(group) && Date.now() < until) await sleep(20)
  const leftOver = alive(group)
  try { process.kill(-group, 'SIGKILL') } catch {}
  await closed
  return { exit, stdout: movePorts(stdout, moved), stderr, leftOver }
}
