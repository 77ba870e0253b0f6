import { type ChildProcess, spawn } from 'node:child_process'
import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { reapOnExit } from './child-reaper.ts'
import { patient } from './timing.ts'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

const newest = (dir: string): number => readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
  .reduce((latest, entry) => Math.max(latest, statSync(join(entry.parentPath, entry.name)).mtimeMs), 0)

let distChecked = false

/**
 * `dist/<path>.js` for `src/<path>.ts`: child processes run the compiled package, as `npm start` and
 * an install do, without a TypeScript loader in each (a third of the CPU a sidecar's start costs).
 * `npm test` builds first; a test run on its own after an edit of src/ is told to build.
 */
export function built (srcPath: string): string {
  if (!distChecked) {
    let compiled = 0
    try { compiled = newest('dist') } catch {}
    if (compiled < newest('src')) throw new Error('dist/ is missing or older than src/: run `npm run build` (npm test builds first)')
    distChecked = true
  }
  return srcPath.replace(/^src\//, 'dist/').replace(/\.ts$/, '.js')
}

export interface Child {
  readonly process: ChildProcess
  readonly lines: Array<Record<string, unknown>>
  stdout: string
  stderr: string
  /** Resolves with the exit code (or signal name). */
  readonly exited: Promise<number | string>
  /** Resolves with the first JSON log line that matches. */
  waitForLine: (match: (line: Record<string, unknown>) => boolean, ms?: number) => Promise<Record<string, unknown>>
}

/** Runs one of the package's bins (`dist/bin/<name>.js`, compiled from src/bin/) as a real child process. */
export function runBin (name: string, env: Record<string, string>, args: string[] = []): Child {
  return runNode([built(`src/bin/${name}.ts`), ...args], env)
}

/**
 * Runs `node <nodeArgs…>` from the package root as a real child process (for example a test app:
 * `runNode(['test/faults/fixtures/fault-app.mjs'], { PORT: '0' })`), with the same line parsing as runBin.
 */
export function runNode (nodeArgs: string[], env: Record<string, string>): Child {
  const child = reapOnExit(spawn(process.execPath, nodeArgs, {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe']
  }))
  const state: Child = {
    process: child,
    lines: [],
    stdout: '',
    stderr: '',
    exited: new Promise(resolve => { child.once('exit', (code, signal) => { resolve(code ?? signal ?? -1) }) }),
    waitForLine: (match, ms = 10_000) => new Promise((resolve, reject) => {
      const found = state.lines.find(match)
      if (found !== undefined) { resolve(found); return }
      const timer = setTimeout(() => { reject(new Error(`no matching log line; stdout: ${state.stdout} stderr: ${state.stderr}`)) }, patient(ms))
      const onLine = (line: Record<string, unknown>): void => {
        if (!match(line)) return
        clearTimeout(timer)
        listeners.delete(onLine)
        resolve(line)
      }
      listeners.add(onLine)
    })
  }
  const listeners = new Set<(line: Record<string, unknown>) => void>()
  let partial = ''
  child.stdout.setEncoding('utf8').on('data', (text: string) => {
    state.stdout += text
    partial += text
    const parts = partial.split('\n')
    partial = parts.pop() as string
    for (const part of parts) {
      if (part.trim() === '') continue
      let line: Record<string, unknown>
      try { line = JSON.parse(part) as Record<string, unknown> } catch { continue }
      state.lines.push(line)
      for (const listener of [...listeners]) listener(line)
    }
  })
  child.stderr.setEncoding('utf8').on('data', (text: string) => { state.stderr += text })
  return state
}
