// What the package tests share (test/webhook/verify-package.test.ts, test/deploy/production-install.test.ts):
// npm and node run in a folder of their own, and the bytes a folder holds.
import { spawn } from 'node:child_process'
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { reapOnExit } from './child-reaper.ts'

/**
 * Without npm's own variables (under `npm test` they name the repository as the project:
 * npm_config_local_prefix), nor the suite's coverage folder: npm and what it runs are not the package.
 */
const childEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^npm_/i.test(name) && name !== 'NODE_V8_COVERAGE'))

export interface Ran { code: number, stdout: string, stderr: string }

/**
 * Runs `file args…` in `cwd` (with `input` on its stdin), through `env -u NODE_OPTIONS`: tap puts
 * its process-info hook into NODE_OPTIONS of every child, and in the node processes npm starts
 * (tsc) that hook breaks them. It leads a process group of its own, which goes with the test
 * (tap's time-out included): npm's own children (node, tsc, an install's scripts) too.
 */
export async function runIn (cwd: string, file: string, args: string[], input?: string): Promise<Ran> {
  const child = reapOnExit(spawn('env', ['-u', 'NODE_OPTIONS', file, ...args], { cwd, env: childEnv, detached: true, stdio: ['pipe', 'pipe', 'pipe'] }), true)
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (text: string) => { stdout += text })
  child.stderr.setEncoding('utf8').on('data', (text: string) => { stderr += text })
  child.stdin.end(input)
  return await new Promise(resolve => {
    child.once('error', () => { resolve({ code: -1, stdout, stderr }) })
    child.once('close', code => { resolve({ code: code ?? -1, stdout, stderr }) })
  })
}

/** The bytes of every file under `path` (or of the file). */
export async function sizeOf (path: string): Promise<number> {
  const info = await stat(path)
  if (!info.isDirectory()) return info.size
  let total = 0
  for (const entry of await readdir(path)) total += await sizeOf(join(path, entry))
  return total
}
