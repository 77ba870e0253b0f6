import { type ChildProcess, spawn } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { reapOnExit } from './child-reaper.ts'

interface TestLike {
  comment: (why: string) => void
  fail: (why: string) => boolean
  teardown: (fn: () => unknown) => void
}

/**
 * The path of program `name` on PATH (a Debian package's; `.ci/run` installs it). Undefined when
 * there is none: under CI=true the test fails (a suite whose tool is missing must not pass by
 * skipping), else it is skipped with the reason (`install`: the command that brings it).
 */
export function findProgram (t: TestLike, name: string, install: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue
    const path = join(dir, name)
    try {
      accessSync(path, constants.X_OK)
      return path
    } catch {}
  }
  const why = `no ${name} on PATH (${install})`
  if (process.env.CI === 'true') t.fail(why)
  else t.comment(`skipped: ${why}`)
  return undefined
}

/** The path of `chromium` on PATH, as findProgram finds it. */
export function findChromium (t: TestLike): string | undefined {
  return findProgram(t, 'chromium', 'apt-get install chromium')
}

/**
 * The flags of a headless Chromium that only talks to the page it is given: without the
 * background-networking ones it reaches for Google's hosts (refused here, slow elsewhere).
 */
const FLAGS = [
  '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'
]

/** A headless Chromium showing one page. */
export interface HeadlessChromium {
  readonly process: ChildProcess
  /** What it wrote to stdout and stderr so far (for a failure's message). */
  output: () => string
}

/**
 * Opens `url` in a headless Chromium of its own (`flags` added to its own), with a fresh profile in a tmp dir; at `t`'s
 * teardown its whole process group is killed, and the profile removed once it exited.
 */
export async function openInChromium (t: TestLike, chromium: string, url: string, flags: readonly string[] = []): Promise<HeadlessChromium> {
  const profile = await mkdtemp(join(tmpdir(), 'sidecar-chromium-'))
  const child = reapOnExit(spawn(chromium, [...FLAGS, ...flags, `--user-data-dir=${profile}`, url], { detached: true, stdio: ['ignore', 'pipe', 'pipe'] }), true)
  let output = ''
  const keep = (text: string): void => { output = (output + text).slice(-20_000) }
  child.stdout.setEncoding('utf8').on('data', keep)
  child.stderr.setEncoding('utf8').on('data', keep)
  const exited = new Promise<void>(resolve => { child.once('exit', () => { resolve() }) })
  child.once('error', error => { keep(`spawn failed: ${error.message}`) })
  t.teardown(async () => {
    if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
      try { process.kill(-child.pid, 'SIGKILL') } catch {}
      await exited
    }
    await rm(profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 })
  })
  return { process: child, output: () => output }
}
