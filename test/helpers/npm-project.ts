// What the package tests share (test/webhook/verify-package.test.ts, test/deploy/production-install.test.ts):
// npm and node run in a folder of their own, and the bytes a folder holds.
import { execFile } from 'node:child_process'
import { readdir, stat } from 'node:fs/promises'
import { join } from 'node:path'

/** Without npm's own variables: under `npm test` they name the repository as the project (npm_config_local_prefix). */
const childEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^npm_/i.test(name)))

export interface Ran { code: number, stdout: string, stderr: string }

/**
 * Runs `file args…` in `cwd` (with `input` on its stdin), through `env -u NODE_OPTIONS`: tap puts
 * its process-info hook into NODE_OPTIONS of every child, and in the node processes npm starts
 * (tsc) that hook breaks them.
 */
export async function runIn (cwd: string, file: string, args: string[], input?: string): Promise<Ran> {
  return await new Promise(resolve => {
    const child = execFile('env', ['-u', 'NODE_OPTIONS', file, ...args], { cwd, env: childEnv, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1, stdout, stderr })
    })
    child.stdin?.end(input)
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
