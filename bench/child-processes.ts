import { type ChildProcess, spawn } from 'node:child_process'
import { closeSync, openSync, readFileSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

/**
 * The real processes a bench run starts (apps, proxies, nginx), each logging to its own file in
 * the run's temp dir. Every one is registered so that it is killed at the end, on failure and on
 * Ctrl-C: a bench never leaves an orphan behind.
 */
export interface BenchChild {
  readonly name: string
  readonly pid: number
  readonly logFile: string
  /** Null while running; the exit code or signal once it has exited. */
  exited: { code: number | null, signal: NodeJS.Signals | null } | null
  /** SIGTERM, then SIGKILL when it has not exited within `graceMs`. */
  stop: (graceMs?: number) => Promise<void>
  /** The last lines of its log (for error messages). */
  logTail: (lines?: number) => string
}

const running = new Map<number, ChildProcess>()

interface SpawnOptions {
  name: string
  command: string
  args: string[]
  env?: NodeJS.ProcessEnv
  cwd: string
  logDir: string
}

/** Starts `command` with its stdout and stderr in `<logDir>/<name>.log`, registered to be killed at the end. */
export function spawnChild (options: SpawnOptions): BenchChild {
  const logFile = join(options.logDir, `${options.name}.log`)
  const fd = openSync(logFile, 'a')
  let child: ChildProcess
  try {
    child = spawn(options.command, options.args, {
      cwd: options.cwd,
      env: { ...process.env, ...options.env },
      stdio: ['ignore', fd, fd]
    })
  } finally {
    closeSync(fd) // the child has its own copy
  }
  if (child.pid === undefined) throw new Error(`${options.name}: cannot start ${options.command}`)
  const pid = child.pid
  running.set(pid, child)
  const exit = new Promise<void>(resolve => {
    child.once('exit', (code, signal) => {
      running.delete(pid)
      handle.exited = { code, signal }
      resolve()
    })
  })
  child.once('error', error => { process.stderr.write(`bench: ${options.name}: ${error.message}\n`) })
  const handle: BenchChild = {
    name: options.name,
    pid,
    logFile,
    exited: null,
    stop: async (graceMs = 10_000) => {
      if (handle.exited !== null) return
      child.kill('SIGTERM')
      const timer = setTimeout(() => { child.kill('SIGKILL') }, graceMs)
      await exit
      clearTimeout(timer)
    },
    logTail: (lines = 20) => {
      try {
        return readFileSync(logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
      } catch {
        return ''
      }
    }
  }
  return handle
}

/** Kills every child still running, at once and synchronously (for exit and signal handlers). */
export function killAllChildren (): void {
  for (const child of running.values()) child.kill('SIGKILL')
  running.clear()
}

/** Children still running (should be 0 after a run). */
export function runningChildren (): number { return running.size }

let guarded = false
/** Installs the exit, signal and crash handlers that kill the children; `cleanup` runs first on a signal. */
export function guardAgainstOrphans (cleanup: () => void): void {
  if (guarded) return
  guarded = true
  process.once('exit', killAllChildren)
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      process.stderr.write(`\nbench: ${signal}, stopping every child process\n`)
      killAllChildren()
      cleanup()
      process.exit(130)
    })
  }
}

/** A free loopback port, never one handed out before (shared with the tests). */
export { freePort } from '../test/helpers/ports.ts'

/** Resolves when `check` passes; throws when `child` exits first or `timeoutMs` passes. */
async function waitUntil (child: BenchChild, what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (child.exited !== null) {
      throw new Error(`${child.name} exited (${child.exited.code ?? child.exited.signal}) before ${what}:\n${child.logTail()}`)
    }
    if (await check().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`${child.name}: not ${what} after ${timeoutMs} ms:\n${child.logTail()}`)
    await sleep(50)
  }
}

/** Waits for a TCP listener on 127.0.0.1:`port`. */
export async function waitForPort (child: BenchChild, port: number, timeoutMs?: number): Promise<void> {
  await waitUntil(child, `listening on ${port}`, async () => await new Promise<boolean>(resolve => {
    const socket = connect({ port, host: '127.0.0.1' })
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => { socket.destroy(); resolve(false) })
  }), timeoutMs)
}

/** Waits for `GET url` to answer 200. */
export async function waitForHttp200 (child: BenchChild, url: string, timeoutMs?: number): Promise<void> {
  await waitUntil(child, `answering 200 on ${url}`, async () => {
    const response = await fetch(url, { signal: AbortSignal.timeout(1000) })
    await response.arrayBuffer()
    return response.status === 200
  }, timeoutMs)
}
