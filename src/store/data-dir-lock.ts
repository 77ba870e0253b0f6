import { unlinkSync } from 'node:fs'
import { link, readdir, readFile, unlink, writeFile } from 'node:fs/promises'
import { join, resolve } from 'node:path'
import { DataDirInUseError } from '../errors.ts'

// The lock is the highest-numbered `build-store-<n>.pid` in DATA_DIR, holding its owner's pid. A dead
// owner's lock is taken over by creating n+1, never by removing n: creation (hard link) is exclusive,
// so of several starters racing over one stale lock exactly one wins, with no compare-and-swap needed.
const LOCK_FILE = /^build-store-(\d{1,15})\.pid$/

function lockFilePath (dir: string, n: number): string {
  return join(dir, `build-store-${n}.pid`)
}

/** Lock files this process holds: a second open here is refused, a stale file with our pid (a restarted container's pid 1) is not ours. */
const heldHere = new Set<string>()

export interface DataDirLock {
  /** The lock file's absolute path. */
  readonly path: string
  /** Removes the lock file; later calls do nothing. */
  release: () => void
}

/**
 * Makes this process the only user of `dataDir` (PGlite has no lock of its own, and two writers
 * lose acknowledged writes). Throws DataDirInUseError naming the holder's pid while a live process
 * holds it; the lock of a process that died without releasing it (SIGKILL, power loss) is taken over.
 */
export async function lockDataDir (dataDir: string): Promise<DataDirLock> {
  const dir = resolve(dataDir)
  if (heldHere.has(dir)) throw new DataDirInUseError(dir, process.pid)
  heldHere.add(dir) // reserved before the first await, so two opens in this process cannot both pass
  const candidate = join(dir, `build-store-candidate-${process.pid}.tmp`)
  let path: string
  try {
    // written beside, then hard-linked into place: a lock file appears atomically, never empty, never overwritten
    await writeFile(candidate, `${process.pid}\n`)
    path = await takeNextGeneration(dir, candidate)
  } catch (error) {
    heldHere.delete(dir)
    throw error
  } finally {
    await unlink(candidate).catch(() => {})
  }
  const release = (): void => {
    if (!heldHere.delete(dir)) return
    process.off('exit', release)
    try { unlinkSync(path) } catch {} // already gone: nothing to release
  }
  process.on('exit', release) // a normal exit that skipped close() still frees the folder
  return { path, release }
}

async function takeNextGeneration (dir: string, candidate: string): Promise<string> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const generations = await listGenerations(dir)
    const top = generations.at(-1) ?? 0
    if (top > 0) {
      const holder = await readHolder(lockFilePath(dir, top))
      if (holder === undefined) continue // released while we looked: look again
      if (isAlive(holder)) throw new DataDirInUseError(dir, holder)
    }
    const path = lockFilePath(dir, top + 1)
    if (!await linkIfAbsent(candidate, path)) continue // another starter took this generation first
    // a generation below a live one (ours came from a listing older than its clean-up) is not the lock
    if ((await listGenerations(dir)).at(-1) !== top + 1) { await unlink(path).catch(() => {}); continue }
    for (const older of generations) await unlink(lockFilePath(dir, older)).catch(() => {})
    return path
  }
  throw new Error(`DATA_DIR ${dir}: lock still contended after 20 attempts`)
}

async function listGenerations (dir: string): Promise<number[]> {
  const generations: number[] = []
  for (const name of await readdir(dir)) {
    const match = LOCK_FILE.exec(name)
    if (match !== null) generations.push(Number(match[1]))
  }
  return generations.sort((a, b) => a - b)
}

async function linkIfAbsent (from: string, to: string): Promise<boolean> {
  try {
    await link(from, to)
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false
    throw error
  }
}

/** The pid in a lock file; undefined when the file is gone, 0 for content no process wrote. */
async function readHolder (path: string): Promise<number | undefined> {
  try {
    return parsePid(await readFile(path, 'utf8'))
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw error
  }
}

function parsePid (text: string): number {
  return /^[1-9]\d{0,9}\s*$/.test(text) ? Number.parseInt(text, 10) : 0
}

/** Signal 0 probes without signalling: ESRCH = no such process; EPERM = alive, owned by another user. */
function isAlive (pid: number): boolean {
  if (pid <= 0 || pid === process.pid) return false // our own pid here is an earlier process's leftover: heldHere caught ours
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH'
  }
}

